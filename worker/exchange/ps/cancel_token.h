// CancelToken: ends a worker's waiting calls at once when it must stop (a
// stop signal). A transport adds a canceller for each call it starts (for
// gRPC, the call context's TryCancel) and removes it when the call ends;
// Cancel() runs every canceller registered, and a call added after it is
// cancelled as it is added, so a waiting push, pull or registration returns
// CANCELLED instead of waiting for its deadline. Calls the worker makes to
// leave the job are not cancelled: they get a short deadline instead
// (kLeaveAfterCancel). gRPC-free. Thread-safe.
#ifndef LOCKSTEP_WORKER_EXCHANGE_PS_CANCEL_TOKEN_H_
#define LOCKSTEP_WORKER_EXCHANGE_PS_CANCEL_TOKEN_H_

#include <atomic>
#include <cstdint>
#include <functional>
#include <map>

#include "absl/base/thread_annotations.h"
#include "absl/synchronization/mutex.h"
#include "absl/time/time.h"

namespace lockstep {

class CancelToken final {
 public:
  // The deadline of a Leave once the token is cancelled: the servers are
  // told, but a stopping worker does not wait long for them.
  static constexpr absl::Duration kLeaveAfterCancel = absl::Milliseconds(500);

  // Registers `cancel`, which must be safe to call from any thread until
  // Remove(id) returns; runs it at once (on this thread) when the token is
  // cancelled already. Returns the id for Remove.
  uint64_t Add(std::function<void()> cancel);
  // Forgets canceller `id` (a call that ended).
  void Remove(uint64_t id);
  // Runs every canceller registered, outside the lock (a gRPC TryCancel
  // may run its call's callback on this thread), and cancels every later
  // Add at once.
  void Cancel();
  bool cancelled() const { return cancelled_.load(); }

  // A Leave's deadline: `deadline`, or sooner when `token` (may be null)
  // is cancelled.
  static absl::Time LeaveDeadline(const CancelToken* token,
                                  absl::Time deadline);

 private:
  absl::Mutex mu_;
  std::atomic<bool> cancelled_{false};
  uint64_t next_id_ ABSL_GUARDED_BY(mu_) = 1;
  std::map<uint64_t, std::function<void()>> cancellers_ ABSL_GUARDED_BY(mu_);
};

}  // namespace lockstep

#endif  // LOCKSTEP_WORKER_EXCHANGE_PS_CANCEL_TOKEN_H_
