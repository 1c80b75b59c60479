#include "common/work_pool.h"

#include <sched.h>

#include <algorithm>
#include <atomic>

namespace lockstep {

struct WorkPool::Job {
  Job(int64_t count, int64_t grain,
      absl::FunctionRef<void(int64_t, int64_t)> fn)
      : count(count),
        grain(grain),
        blocks((count + grain - 1) / grain),
        fn(fn) {}
  const int64_t count;
  const int64_t grain;
  const int64_t blocks;
  const absl::FunctionRef<void(int64_t, int64_t)> fn;
  std::atomic<int64_t> next{0};  // The next block to claim.
  int helpers = 0;               // Helpers working on it; guarded by mu_.
};

WorkPool::WorkPool(int threads) {
  for (int i = 1; i < threads; ++i) helpers_.emplace_back([this] { Help(); });
}

WorkPool::~WorkPool() {
  {
    std::lock_guard<std::mutex> lock(mu_);
    stop_ = true;
  }
  work_.notify_all();
  for (std::thread& t : helpers_) t.join();
}

int WorkPool::AvailableCores() {
  cpu_set_t set;
  CPU_ZERO(&set);
  if (sched_getaffinity(0, sizeof(set), &set) != 0) return 1;
  return std::max(1, CPU_COUNT(&set));
}

void WorkPool::Work(Job* job) {
  for (;;) {
    const int64_t block = job->next.fetch_add(1, std::memory_order_relaxed);
    if (block >= job->blocks) return;
    const int64_t begin = block * job->grain;
    job->fn(begin, std::min(job->count, begin + job->grain));
  }
}

void WorkPool::ParallelFor(int64_t count, int64_t grain,
                           absl::FunctionRef<void(int64_t, int64_t)> fn) {
  if (count <= 0) return;
  grain = std::max<int64_t>(grain, 1);
  Job job(count, grain, fn);
  if (helpers_.empty() || job.blocks == 1) {
    Work(&job);
    return;
  }
  {
    std::lock_guard<std::mutex> lock(mu_);
    queue_.push_back(&job);
  }
  // As many helpers as there are blocks for beside the caller's.
  const int64_t wanted =
      std::min<int64_t>(job.blocks - 1, static_cast<int64_t>(helpers_.size()));
  for (int64_t i = 0; i < wanted; ++i) work_.notify_one();
  Work(&job);
  // Every block is claimed: no helper may join any more; wait for those
  // still running theirs.
  std::unique_lock<std::mutex> lock(mu_);
  queue_.erase(std::remove(queue_.begin(), queue_.end(), &job), queue_.end());
  done_.wait(lock, [&] { return job.helpers == 0; });
}

void WorkPool::Help() {
  std::unique_lock<std::mutex> lock(mu_);
  for (;;) {
    work_.wait(lock, [&] { return stop_ || !queue_.empty(); });
    if (stop_) return;
    Job* job = queue_.front();
    // A job whose blocks are all claimed has nothing left for a helper.
    if (job->next.load(std::memory_order_relaxed) >= job->blocks) {
      queue_.pop_front();
      continue;
    }
    ++job->helpers;
    lock.unlock();
    Work(job);
    lock.lock();
    // The caller may be waiting for this; it owns `job` until then.
    if (--job->helpers == 0) done_.notify_all();
  }
}

}  // namespace lockstep
