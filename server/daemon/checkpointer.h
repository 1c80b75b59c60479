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
#include <string>
#include <utility>

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
  // and delays the next try.
  void SaveIfDue(absl::Time now) ABSL_LOCKS_EXCLUDED(mu_);
  // Saves the newest version unless it is saved already.
  absl::Status SaveUnsaved() ABSL_LOCKS_EXCLUDED(mu_);
  // The shard restarted from `version`'s checkpoint: it is saved.
  void Restored(int64_t version) ABSL_LOCKS_EXCLUDED(mu_);

  int64_t last_saved_version() ABSL_LOCKS_EXCLUDED(mu_);

 private:
  CheckpointStore* const store_;      // Not owned.
  ParameterServer* const core_;       // Not owned.
  ServerTelemetry* const telemetry_;  // Not owned; may be null.
  const DaemonLog log_;
  absl::Mutex mu_;  // One save at a time.
  CheckpointSchedule schedule_ ABSL_GUARDED_BY(mu_);
};

}  // namespace lockstep

#endif  // LOCKSTEP_SERVER_DAEMON_CHECKPOINTER_H_
