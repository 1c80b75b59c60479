// What one shard last saw of each rank: its last contact, its latest step
// pushed and how long its last step took (WorkerActivity in the proto).
//
// Thread-safe: one lock, taken once per call a worker makes, and a leaf of
// the server's lock order (nothing is called under it).
#ifndef LOCKSTEP_SERVER_CORE_ACTIVITY_LOG_H_
#define LOCKSTEP_SERVER_CORE_ACTIVITY_LOG_H_

#include <cstdint>
#include <vector>

#include "absl/base/thread_annotations.h"
#include "absl/synchronization/mutex.h"
#include "absl/time/time.h"
#include "server/core/push_checks.h"

namespace lockstep {

// What the shard last saw of one rank (see WorkerActivity in the proto).
struct WorkerActivity {
  int rank = 0;
  absl::Time last_contact = absl::InfinitePast();  // Any RPC; past: never.
  int64_t last_step = -1;  // Latest step pushed; -1: none.
  // Between the first pushes of its two latest steps (when consecutive);
  // zero until then.
  absl::Duration last_step_time;
};

class ActivityLog final {
 public:
  explicit ActivityLog(int num_workers);

  ActivityLog(const ActivityLog&) = delete;
  ActivityLog& operator=(const ActivityLog&) = delete;

  // Records a call from `rank` at `when`; a push also names its step.
  // Ranks out of range are ignored.
  void Note(int rank, absl::Time when, int64_t pushed_step = kNotAPush);

  // One per rank, in rank order.
  std::vector<WorkerActivity> Get() const;

 private:
  mutable absl::Mutex mu_;
  std::vector<WorkerActivity> activity_ ABSL_GUARDED_BY(mu_);
  // By rank: when its first push of last_step arrived.
  std::vector<absl::Time> step_started_ ABSL_GUARDED_BY(mu_);
};

}  // namespace lockstep

#endif  // LOCKSTEP_SERVER_CORE_ACTIVITY_LOG_H_
