// Why a worker leaves its job, as it tells the servers (LeaveRequest).
//
// The servers judge the job by it: a rank that finished while others still
// train means the ranks ran different numbers of steps (uneven data), which
// no synchronous step can survive; a rank that failed makes the job end as
// failed unless a replacement registers and finishes; a stopped rank (a
// signal) may be replaced. Unspecified (a worker that predates the field)
// is judged as before: not at all.
#ifndef LOCKSTEP_COMMON_BASE_LEAVE_NOTE_H_
#define LOCKSTEP_COMMON_BASE_LEAVE_NOTE_H_

#include <string>

namespace lockstep {

// The numbers are LeaveRequest.reason's (proto/lockstep/v1/lockstep.proto).
enum class LeaveReason {
  kUnspecified = 0,
  kFinished = 1,
  kStopped = 2,
  kFailed = 3
};

struct LeaveNote {
  LeaveReason reason = LeaveReason::kUnspecified;
  // For kFailed: what went wrong, for the servers' log and exit message.
  std::string detail;
};

// At most this many bytes of a detail travel and are kept.
inline constexpr size_t kMaxLeaveDetailBytes = 1024;

}  // namespace lockstep

#endif  // LOCKSTEP_COMMON_BASE_LEAVE_NOTE_H_
