#include "worker/device/cpu/cpu_thread_pool.h"

#include <algorithm>

namespace lockstep {

CpuThreadPool::CpuThreadPool(int threads) : threads_(std::max(threads, 1)) {
  for (int share = 1; share < threads_; ++share) {
    helpers_.emplace_back([this, share] { Loop(share); });
  }
}

CpuThreadPool::~CpuThreadPool() {
  {
    absl::MutexLock lock(&mu_);
    stop_ = true;
  }
  for (std::thread& helper : helpers_) helper.join();
}

void CpuThreadPool::Run(
    int64_t count,
    absl::FunctionRef<void(int share, int64_t begin, int64_t end)> fn) {
  if (threads_ == 1) {
    fn(0, 0, count);
    return;
  }
  {
    absl::MutexLock lock(&mu_);
    count_ = count;
    fn_ = &fn;
    running_ = threads_ - 1;
    ++generation_;
  }
  Share(0);
  absl::MutexLock lock(&mu_);
  mu_.Await(absl::Condition(this, &CpuThreadPool::HelpersDone));
  fn_ = nullptr;
}

void CpuThreadPool::Share(int share) {
  const int64_t begin = count_ * share / threads_;
  const int64_t end = count_ * (share + 1) / threads_;
  (*fn_)(share, begin, end);
}

void CpuThreadPool::Loop(int share) {
  int64_t seen = 0;
  while (true) {
    {
      absl::ReaderMutexLock lock(&mu_);
      const Woken woken{this, seen};
      mu_.Await(absl::Condition(&woken));
      if (stop_) return;
      seen = generation_;
    }
    Share(share);
    absl::MutexLock lock(&mu_);
    --running_;
  }
}

}  // namespace lockstep
