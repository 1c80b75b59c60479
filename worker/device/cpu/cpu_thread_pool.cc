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
    std::lock_guard<std::mutex> lock(mu_);
    stop_ = true;
  }
  work_.notify_all();
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
    std::lock_guard<std::mutex> lock(mu_);
    count_ = count;
    fn_ = &fn;
    running_ = threads_ - 1;
    ++generation_;
  }
  work_.notify_all();
  Share(0);
  std::unique_lock<std::mutex> lock(mu_);
  done_.wait(lock, [this] { return running_ == 0; });
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
      std::unique_lock<std::mutex> lock(mu_);
      work_.wait(lock, [&] { return stop_ || generation_ != seen; });
      if (stop_) return;
      seen = generation_;
    }
    Share(share);
    bool last;
    {
      std::lock_guard<std::mutex> lock(mu_);
      last = --running_ == 0;
    }
    if (last) done_.notify_one();
  }
}

}  // namespace lockstep
