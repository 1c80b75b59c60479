// One shard's recovery duties: step timeouts (warn, give a step up, evict
// the ranks it waits for) and consistent snapshots for checkpoints.
//
// ShardRecovery works on the shard's StepBarriers and Membership (not
// owned) and keeps only which steps it has reported, so that each is
// reported once. Thread-safe: its lock guards that record alone and is a
// leaf of the server's lock order; the barriers and the membership are
// called without it.
#ifndef LOCKSTEP_SERVER_CORE_SHARD_RECOVERY_H_
#define LOCKSTEP_SERVER_CORE_SHARD_RECOVERY_H_

#include <cstdint>
#include <optional>
#include <vector>

#include "absl/base/thread_annotations.h"
#include "absl/status/statusor.h"
#include "absl/synchronization/mutex.h"
#include "absl/time/time.h"
#include "absl/types/span.h"
#include "server/core/checkpoint.h"
#include "server/core/chunk_barrier.h"
#include "server/core/membership.h"
#include "server/core/server_options.h"
#include "server/core/step_barriers.h"

namespace lockstep {

// What CheckStepTimeout found: a step gathered for longer than half the
// timeout (warn) or the whole of it (expired: not applied, its waiting
// pushes answered ABORTED, the missing ranks evicted; kSsp: see `ssp`).
struct StepAlarm {
  int64_t step = 0;
  absl::Duration waited;
  std::vector<int> missing;
  bool expired = false;
  // kSsp: `step` is the slowest ranks' next step, which the others' held
  // pushes wait for. Expired without `fail_job`, nothing is given up (the
  // held pushes were applied): the missing ranks are evicted and not
  // waited for until they have caught up, and the held pushes answered.
  bool ssp = false;
};

class ShardRecovery final {
 public:
  // `barriers` and `members` are not owned and outlive this; `options`
  // gives the shard's place in the job and the clock.
  ShardRecovery(const ParameterServerOptions& options, StepBarriers* barriers,
                Membership* members);

  ShardRecovery(const ShardRecovery&) = delete;
  ShardRecovery& operator=(const ShardRecovery&) = delete;

  // See ParameterServer::CheckStepTimeout.
  std::vector<StepAlarm> CheckStepTimeout(absl::Time now,
                                          absl::Duration timeout,
                                          bool fail_job);

  // See ParameterServer::Snapshot.
  absl::StatusOr<ShardCheckpoint> Snapshot(absl::Duration timeout,
                                           bool lined_up = true);
  // See ParameterServer::TakePinned.
  std::optional<ShardCheckpoint> TakePinned();

 private:
  // The oldest step `chunks` wait on at `now` (expired and ssp not set).
  std::optional<StepAlarm> OldestWait(absl::Span<ChunkBarrier* const> chunks,
                                      absl::Time now) const;
  // The warning, unless its step was warned of already.
  std::vector<StepAlarm> WarnOnce(const StepAlarm& alarm);
  void GiveUpStep(const StepAlarm& alarm, bool fail_job,
                  absl::Span<ChunkBarrier* const> chunks);

  const ParameterServerOptions options_;
  StepBarriers* const barriers_;  // Not owned.
  Membership* const members_;     // Not owned.

  absl::Mutex mu_;
  int64_t warned_step_ ABSL_GUARDED_BY(mu_) = -1;
};

}  // namespace lockstep

#endif  // LOCKSTEP_SERVER_CORE_SHARD_RECOVERY_H_
