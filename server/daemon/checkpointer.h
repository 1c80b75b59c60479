// The shard's checkpoint writer: saves a checkpoint by the clock
// (SaveIfDue, on CheckpointSchedule's terms), on request (lockstep_ctl, a
// drain) and before the server gives up (SaveUnsaved), one at a time, and
// tells the telemetry of each.
//
// Owns the schedule (what was last saved, the retry delay); the store,
// core and telemetry are not owned and must outlive it. Thread-safe: mu_
// serializes the saves and guards the schedule; it is held while the core
// snapshots and the store writes (both take only their own locks), never
// while logging a failure.
#ifndef LOCKSTEP_SERVER_DAEMON_CHECKPOINTER_H_
#define LOCKSTEP_SERVER_DAEMON_CHECKPOINTER_H_

#include <cstdint>
#include <optional>
#include <string>
#include <utility>
#include <vector>

#include "absl/base/thread_annotations.h"
#include "absl/status/status.h"
#include "absl/status/statusor.h"
#include "absl/synchronization/mutex.h"
#include "absl/time/time.h"
#include "server/core/checkpoint.h"
#include "server/core/parameter_server.h"
#include "server/daemon/checkpoint_schedule.h"
#include "server/daemon/daemon_log.h"
#include "server/daemon/server_telemetry.h"

namespace lockstep {

class Checkpointer final {
 public:
  struct Options {
    int64_t every_steps = 0;                      // 0: no step trigger.
    absl::Duration every = absl::ZeroDuration();  // 0: no time trigger.
  };

  // `telemetry` may be null.
  Checkpointer(const Options& options, CheckpointStore* store,
               ParameterServer* core, ServerTelemetry* telemetry,
               DaemonLog log);

  // Writes a checkpoint of the newest version now, waiting up to `wait`
  // for the chunks to line up at one version; returns its path and
  // version. A success ends any retry delay.
  absl::StatusOr<std::pair<std::string, int64_t>> Save(
      absl::Duration wait = absl::Seconds(30)) ABSL_LOCKS_EXCLUDED(mu_);
  // The periodic checkpoint: saves when due at `now`; a failure is logged
  // and delays the next try. In sync mode the step trigger saves the
  // versions the chunks pinned (multiples of every_steps), so that every
  // shard saves the same versions; a multiple passed while the one before
  // was still unsaved is skipped, and said once per run of skips.
  void SaveIfDue(absl::Time now) ABSL_LOCKS_EXCLUDED(mu_);
  // Saves the newest version unless it is saved already.
  absl::Status SaveUnsaved() ABSL_LOCKS_EXCLUDED(mu_);
  // The shard restarted from `version`'s checkpoint: it is saved.
  void Restored(int64_t version) ABSL_LOCKS_EXCLUDED(mu_);
  // Rank `rank` (of `incarnation`) saw the shard at `from` and asks it to
  // go back to its checkpoint of version `to` (ParameterServer::StepBack);
  // the checkpoints after `to` are set aside (NAME.stepped-back), as the
  // job computes those versions again. Returns `to`. FAILED_PRECONDITION
  // naming the versions held when there is no checkpoint of `to`.
  absl::StatusOr<int64_t> StepBack(int rank, int64_t incarnation, int64_t from,
                                   int64_t to) ABSL_LOCKS_EXCLUDED(mu_);
  // The versions a step back may go to.
  std::vector<int64_t> Versions() const { return store_->Versions(); }

  int64_t last_saved_version() ABSL_LOCKS_EXCLUDED(mu_);

 private:
  // Writes `snapshot` and notes it saved.
  absl::StatusOr<std::pair<std::string, int64_t>> WriteLocked(
      const ShardCheckpoint& snapshot) ABSL_EXCLUSIVE_LOCKS_REQUIRED(mu_);
  // The pinned version, when there is one to save at `now`; its write's
  // outcome (nullopt: nothing was pinned or due).
  std::optional<absl::StatusOr<std::pair<std::string, int64_t>>> SavePinned(
      absl::Time now) ABSL_LOCKS_EXCLUDED(mu_);
  // Says so when more multiples were skipped since last time.
  void ReportSkipped() ABSL_LOCKS_EXCLUDED(mu_);

  CheckpointStore* const store_;      // Not owned.
  ParameterServer* const core_;       // Not owned.
  ServerTelemetry* const telemetry_;  // Not owned; may be null.
  const DaemonLog log_;
  absl::Mutex mu_;  // One save at a time.
  CheckpointSchedule schedule_ ABSL_GUARDED_BY(mu_);
  const int64_t every_steps_;
  int64_t skipped_said_ ABSL_GUARDED_BY(mu_) = 0;
};

}  // namespace lockstep

#endif  // LOCKSTEP_SERVER_DAEMON_CHECKPOINTER_H_
