// What a step session does after a step failed or its group changes: stop
// (a stop signal came), register again (a retryable failure, within the
// Rejoiner's deadline and backoff), or give the failure back. Both kinds
// of step session share it, so lockstep_worker and the Python package
// recover alike (docs/faults.md).
//
// Externally synchronized (the training thread).
#ifndef LOCKSTEP_WORKER_EXCHANGE_STEP_RECOVERY_H_
#define LOCKSTEP_WORKER_EXCHANGE_STEP_RECOVERY_H_

#include <atomic>
#include <cstdint>
#include <functional>

#include "absl/status/statusor.h"
#include "absl/time/time.h"
#include "worker/exchange/rejoiner.h"
#include "worker/exchange/step_session.h"

namespace lockstep {

class StepRecovery final {
 public:
  // Joins once, waiting at most `timeout`.
  using JoinOnceFn =
      std::function<absl::StatusOr<StepOutcome>(absl::Duration timeout)>;

  explicit StepRecovery(const StepSessionOptions& options);

  // A step (or the first Join) succeeded: the deadline counts from now.
  void StepSucceeded() { rejoiner_.StepSucceeded(); }
  // Local steps went on since the servers last answered
  // (Rejoiner::Progressed).
  void Progressed() { rejoiner_.Progressed(); }

  // After step failure `failed`: `stopped` when a stop signal came (its
  // servers may be draining or gone), else for a retryable failure the
  // outcome of joining again (rejoined) when `can_rejoin`, else `failed`.
  absl::StatusOr<StepOutcome> AfterFailure(const absl::Status& failed,
                                           bool can_rejoin,
                                           const JoinOnceFn& join);

  bool StopRequested() const {
    return stop_requested_ != nullptr && stop_requested_->load();
  }
  int64_t rejoins() const { return rejoiner_.rejoins(); }

 private:
  const std::atomic<bool>* const stop_requested_;  // Not owned; may be null.
  Rejoiner rejoiner_;
};

}  // namespace lockstep

#endif  // LOCKSTEP_WORKER_EXCHANGE_STEP_RECOVERY_H_
