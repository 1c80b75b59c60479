// A team of threads that splits element-wise loops, for a server shard's
// optimizer and sums (--server_threads): one shard can use every core it
// may, even when it owns a single large chunk.
//
// ParallelFor may be called from any number of threads at once (gRPC's
// threads apply different chunks concurrently): each call is a job that the
// caller works on itself and idle helpers join. Blocks are claimed in any
// order by any thread, so it suits loops whose every element is computed
// on its own -- the result is then the same bits whatever the split. The
// caller's own thread always takes part, so a job never waits for a helper
// busy elsewhere.
//
// Thread-safe.
#ifndef LOCKSTEP_COMMON_BASE_WORK_POOL_H_
#define LOCKSTEP_COMMON_BASE_WORK_POOL_H_

#include <cstdint>
#include <deque>
#include <thread>
#include <vector>

#include "absl/base/thread_annotations.h"
#include "absl/functional/function_ref.h"
#include "absl/synchronization/mutex.h"

namespace lockstep {

class WorkPool {
 public:
  // `threads` (at least 1) work on a job at most: the caller and up to
  // threads - 1 helpers started here.
  explicit WorkPool(int threads);
  ~WorkPool();
  WorkPool(const WorkPool&) = delete;
  WorkPool& operator=(const WorkPool&) = delete;

  int threads() const { return static_cast<int>(helpers_.size()) + 1; }

  // Calls fn(begin, end) for consecutive blocks of `grain` elements (the
  // last may be shorter) that together cover [0, count), each once, and
  // returns when all are done. A loop of one block runs on the caller's
  // thread alone.
  void ParallelFor(int64_t count, int64_t grain,
                   absl::FunctionRef<void(int64_t begin, int64_t end)> fn);

  // The threads this process may run on (sched_getaffinity), at least 1:
  // --server_threads' default.
  static int AvailableCores();

 private:
  struct Job;
  bool HasJobOrStop() const ABSL_EXCLUSIVE_LOCKS_REQUIRED(mu_) {
    return stop_ || !queue_.empty();
  }
  void Help();
  // Claims and runs blocks of `job` until none is left.
  static void Work(Job* job);

  // Helpers wait holding mu_ exclusively (they take jobs off queue_), so
  // absl::Mutex wakes them one per unlock: each that takes a job wakes
  // the next while a job is queued.
  absl::Mutex mu_;
  std::deque<Job*> queue_ ABSL_GUARDED_BY(mu_);  // Jobs helpers may join.
  bool stop_ ABSL_GUARDED_BY(mu_) = false;
  std::vector<std::thread> helpers_;
};

}  // namespace lockstep

#endif  // LOCKSTEP_COMMON_BASE_WORK_POOL_H_
