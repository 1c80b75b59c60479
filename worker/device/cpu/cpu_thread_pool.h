// A fixed team of threads for the CPU device's parallel loops: Run splits
// [0, count) into one contiguous share per thread, always the same shares
// for the same count, runs them (the caller's thread takes the first) and
// returns when all are done. Shares by thread, not by work stealing, so a
// parallel result that sums per share sums in the same order every time.
// Run is externally synchronized (one loop at a time), as a Device is.
#ifndef LOCKSTEP_WORKER_DEVICE_CPU_CPU_THREAD_POOL_H_
#define LOCKSTEP_WORKER_DEVICE_CPU_CPU_THREAD_POOL_H_

#include <cstdint>
#include <thread>
#include <vector>

#include "absl/base/thread_annotations.h"
#include "absl/functional/function_ref.h"
#include "absl/synchronization/mutex.h"

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
  // What a helper waits for: a loop after the one it has `seen`, or stop_.
  struct Woken {
    const CpuThreadPool* pool;
    int64_t seen;
    bool operator()() const ABSL_SHARED_LOCKS_REQUIRED(pool->mu_) {
      return pool->stop_ || pool->generation_ != seen;
    }
  };
  bool HelpersDone() const ABSL_SHARED_LOCKS_REQUIRED(mu_) {
    return running_ == 0;
  }
  void Share(int share);
  void Loop(int share);

  const int threads_;
  // Helpers wait holding mu_ shared: absl::Mutex wakes every reader whose
  // condition holds at once, but exclusive waiters one per unlock, which
  // would start the shares one after another.
  absl::Mutex mu_;
  int64_t generation_ ABSL_GUARDED_BY(mu_) = 0;  // Bumped by each Run.
  int running_ ABSL_GUARDED_BY(mu_) = 0;         // Helper shares not done.
  bool stop_ ABSL_GUARDED_BY(mu_) = false;
  // The loop in progress: set by Run with mu_ held before it bumps
  // generation_, read by the shares after they saw it bumped.
  int64_t count_ = 0;
  const absl::FunctionRef<void(int, int64_t, int64_t)>* fn_ = nullptr;
  std::vector<std::thread> helpers_;
};

}  // namespace lockstep

#endif  // LOCKSTEP_WORKER_DEVICE_CPU_CPU_THREAD_POOL_H_
