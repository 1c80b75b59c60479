// Runs tasks one at a time, in the order they came, on a thread of its
// own, with a bound on how many may wait: for work that must leave the
// thread that asked (a server's checkpoint written on request, off gRPC's
// threads) without a thread per request and without outliving its owner.
//
// Thread-safe.
#ifndef LOCKSTEP_COMMON_BASE_SERIAL_EXECUTOR_H_
#define LOCKSTEP_COMMON_BASE_SERIAL_EXECUTOR_H_

#include <deque>
#include <functional>
#include <mutex>
#include <thread>

#include "absl/base/thread_annotations.h"
#include "absl/synchronization/mutex.h"

namespace lockstep {

class SerialExecutor {
 public:
  // At most `max_waiting` (>= 0) tasks wait while one runs.
  explicit SerialExecutor(int max_waiting);
  // Shutdown().
  ~SerialExecutor();
  SerialExecutor(const SerialExecutor&) = delete;
  SerialExecutor& operator=(const SerialExecutor&) = delete;

  // Queues `task` and returns true; false, with `task` neither run nor
  // kept, when max_waiting tasks already wait or after Shutdown().
  bool Submit(std::function<void()> task);

  // Tasks taken and waiting for the one running (or about to).
  int waiting();

  // Refuses new tasks, waits for the running one and runs the waiting ones,
  // then ends the thread. When it returns no task runs or will run.
  // Idempotent; not from inside a task.
  void Shutdown();

 private:
  bool HasTaskOrStopping() const ABSL_EXCLUSIVE_LOCKS_REQUIRED(mu_) {
    return stopping_ || !waiting_.empty();
  }
  void Loop();

  const int max_waiting_;
  absl::Mutex mu_;
  std::deque<std::function<void()>> waiting_ ABSL_GUARDED_BY(mu_);
  bool stopping_ ABSL_GUARDED_BY(mu_) = false;
  bool running_ ABSL_GUARDED_BY(mu_) = false;
  std::once_flag joined_;
  std::thread thread_;  // Last: started once the rest exists.
};

}  // namespace lockstep

#endif  // LOCKSTEP_COMMON_BASE_SERIAL_EXECUTOR_H_
