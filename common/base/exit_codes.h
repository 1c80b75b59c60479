// Exit codes of every Lockstep binary, chosen so that an orchestrator's
// restart policy can tell a failure worth retrying from one that will fail
// again (docs/faults.md).
#ifndef LOCKSTEP_COMMON_BASE_EXIT_CODES_H_
#define LOCKSTEP_COMMON_BASE_EXIT_CODES_H_

#include "absl/status/status.h"

namespace lockstep {

inline constexpr int kExitOk = 0;
// Unexpected; look at the log.
inline constexpr int kExitFailure = 1;
// Bad flags, data, configuration or checkpoint: retrying will not help.
inline constexpr int kExitPermanent = 2;
// A lost peer, a timeout, a server that stayed away: retrying may help
// (EX_TEMPFAIL).
inline constexpr int kExitRetryable = 75;
// Stopped by SIGTERM or SIGINT after leaving the job cleanly.
inline constexpr int kExitTerminated = 143;

// Whether a failed RPC is worth retrying after registering again: the
// server restarted (NOT_FOUND), is away (UNAVAILABLE), gave up on a step or
// evicted us (ABORTED), or did not answer in time (DEADLINE_EXCEEDED).
inline bool IsRetryable(const absl::Status& status) {
  switch (status.code()) {
    case absl::StatusCode::kUnavailable:
    case absl::StatusCode::kNotFound:
    case absl::StatusCode::kAborted:
    case absl::StatusCode::kDeadlineExceeded:
      return true;
    default:
      return false;
  }
}

// The exit code for a training run that ended with `status`.
inline int ExitCodeFor(const absl::Status& status) {
  if (status.ok()) return kExitOk;
  if (IsRetryable(status) || status.code() == absl::StatusCode::kCancelled) {
    return kExitRetryable;
  }
  if (status.code() == absl::StatusCode::kInvalidArgument ||
      status.code() == absl::StatusCode::kFailedPrecondition ||
      status.code() == absl::StatusCode::kAlreadyExists ||
      status.code() == absl::StatusCode::kDataLoss) {
    return kExitPermanent;
  }
  return kExitFailure;
}

}  // namespace lockstep

#endif  // LOCKSTEP_COMMON_BASE_EXIT_CODES_H_
