#include "worker/cpu_thread_pool.h"

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
  mu_.Await(absl::Condition(
      +[](int* running) { return *running == 0; }, &running_));
  fn_ = nullptr;
}

void CpuThreadPool::Share(int share) {
  const int64_t begin = count_ * share / threads_;
  const int64_t end = count_ * (share + 1) / threads_;
  (*fn_)(share, begin, end);
}

bool CpuThreadPool::Woken(Wait* wait) {
  return wait->pool->stop_ || wait->pool->generation_ != wait->seen;
}

void CpuThreadPool::Loop(int share) {
  Wait wait{this, 0};
  while (true) {
    {
      absl::MutexLock lock(&mu_);
      mu_.Await(absl::Condition(&CpuThreadPool::Woken, &wait));
      if (stop_) return;
      wait.seen = generation_;
    }
    Share(share);
    absl::MutexLock lock(&mu_);
    --running_;
  }
}

}  // namespace lockstep
