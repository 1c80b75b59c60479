#include "common/base/work_pool.h"

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
  // Whether no helper works on it; with the pool's mu_ held.
  bool Unhelped() const { return helpers == 0; }
  std::atomic<int64_t> next{0};  // The next block to claim.
  // Helpers working on it, guarded by the pool's mu_ (which a nested
  // struct's annotation cannot name): read and written only by WorkPool
  // functions that hold it.
  int helpers = 0;
};

WorkPool::WorkPool(int threads) {
  for (int i = 1; i < threads; ++i) helpers_.emplace_back([this] { Help(); });
}

WorkPool::~WorkPool() {
  {
    absl::MutexLock lock(&mu_);
    stop_ = true;
  }
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
    absl::MutexLock lock(&mu_);
    queue_.push_back(&job);
  }
  Work(&job);
  // Every block is claimed: no helper may join any more; wait for those
  // still running theirs.
  absl::MutexLock lock(&mu_);
  queue_.erase(std::remove(queue_.begin(), queue_.end(), &job), queue_.end());
  mu_.Await(absl::Condition(&job, &Job::Unhelped));
}

void WorkPool::Help() {
  mu_.Lock();
  for (;;) {
    mu_.Await(absl::Condition(this, &WorkPool::HasJobOrStop));
    if (stop_) break;
    Job* job = queue_.front();
    // A job whose blocks are all claimed has nothing left for a helper.
    if (job->next.load(std::memory_order_relaxed) >= job->blocks) {
      queue_.pop_front();
      continue;
    }
    ++job->helpers;
    mu_.Unlock();
    Work(job);
    mu_.Lock();
    // The caller may be waiting for this; it owns `job` until then.
    --job->helpers;
  }
  mu_.Unlock();
}

}  // namespace lockstep
