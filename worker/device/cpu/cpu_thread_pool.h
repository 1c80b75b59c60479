// A fixed team of threads for the CPU device's parallel loops: Run splits
// [0, count) into one contiguous share per thread, always the same shares
// for the same count, runs them (the caller's thread takes the first) and
// returns when all are done. Shares by thread, not by work stealing, so a
// parallel result that sums per share sums in the same order every time.
// Run is externally synchronized (one loop at a time), as a Device is.
#ifndef LOCKSTEP_WORKER_DEVICE_CPU_CPU_THREAD_POOL_H_
#define LOCKSTEP_WORKER_DEVICE_CPU_CPU_THREAD_POOL_H_

#include <condition_variable>
#include <cstdint>
#include <mutex>
#include <thread>
#include <vector>

#include "absl/functional/function_ref.h"

namespace lockstep {

class CpuThreadPool {
 public:
  // `threads` (at least 1) runs each loop: the caller's and threads - 1
  // started here.
  explicit CpuThreadPool(int threads);
  ~CpuThreadPool();
  CpuThreadPool(const CpuThreadPool&) = delete;
  CpuThreadPool& operator=(const CpuThreadPool&) = delete;

  int threads() const { return threads_; }

  // Calls fn(share, begin, end) for share = 0 .. threads() - 1, where share
  // s covers [count * s / threads(), count * (s + 1) / threads()) (empty
  // shares are called too); share 0 runs on the calling thread.
  void Run(int64_t count,
           absl::FunctionRef<void(int share, int64_t begin, int64_t end)> fn);

 private:
  void Share(int share);
  void Loop(int share);

  const int threads_;
  // std::mutex rather than absl::Mutex: ThreadSanitizer sees through it
  // (Debian's absl is not built for it).
  std::mutex mu_;
  std::condition_variable work_;  // A new loop or stop_, for the helpers.
  std::condition_variable done_;  // running_ reached 0, for Run.
  int64_t generation_ = 0;        // Bumped by each Run; guarded by mu_.
  int running_ = 0;               // Helper shares not done; guarded by mu_.
  bool stop_ = false;             // Guarded by mu_.
  // The loop in progress; set by Run before it bumps generation_.
  int64_t count_ = 0;
  const absl::FunctionRef<void(int, int64_t, int64_t)>* fn_ = nullptr;
  std::vector<std::thread> helpers_;
};

}  // namespace lockstep

#endif  // LOCKSTEP_WORKER_DEVICE_CPU_CPU_THREAD_POOL_H_
