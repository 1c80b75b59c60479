#include "worker/exchange/step_recovery.h"

#include "common/base/exit_codes.h"
#include "common/base/status_macros.h"

namespace lockstep {

StepRecovery::StepRecovery(const StepSessionOptions& o)
    : stop_requested_(o.stop_requested),
      rejoiner_(o.who, o.seed, o.rank, o.rejoin_timeout, o.rejoin_timeout_name,
                o.env) {
  rejoiner_.set_stop(o.stop_requested);
}

absl::StatusOr<StepOutcome> StepRecovery::AfterFailure(
    const absl::Status& failed, bool can_rejoin, const JoinOnceFn& join) {
  if (StopRequested()) {
    StepOutcome stopped;
    stopped.stopped = true;
    return stopped;
  }
  if (!IsRetryable(failed) || !can_rejoin) return failed;
  // The server restarted, gave up on the step or evicted us, or a peer was
  // lost: register again and go on from the version the job has (the data
  // order follows it, so no batch is skipped or repeated in sync mode).
  // Registering may succeed again and again while no step does (a lost
  // peer never replaced): the deadline counts from the last step that
  // succeeded.
  RETURN_IF_ERROR(rejoiner_.CheckDeadline(failed));
  StepOutcome joined;
  absl::StatusOr<int64_t> version = rejoiner_.Rejoin(
      failed, [&](absl::Duration timeout) -> absl::StatusOr<int64_t> {
        ASSIGN_OR_RETURN(joined, join(timeout));
        return joined.version;
      });
  // A stop signal that ends the backoff gives CANCELLED: the caller ends
  // the run as a stop that was waiting.
  if (!version.ok()) return version.status();
  joined.rejoined = true;
  return joined;
}

}  // namespace lockstep
