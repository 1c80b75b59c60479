// An elastic group member's watch of its group at the coordinator, on a
// thread of its own (Coordinator.WatchGroup): while it is open the
// coordinator counts the member's rank as alive for its quorum, so that
// ranks waiting to join do not form a group without members still at
// work (docs/faults.md, "Elastic all-reduce jobs", "Elastic PS jobs"); and
// it can say when the group should re-form.
//
// Start and Stop from one thread (the training thread).
#ifndef LOCKSTEP_WORKER_EXCHANGE_GROUP_WATCH_H_
#define LOCKSTEP_WORKER_EXCHANGE_GROUP_WATCH_H_

#include <cstdint>
#include <functional>
#include <string>
#include <thread>

#include "absl/base/thread_annotations.h"
#include "absl/synchronization/mutex.h"
#include "absl/time/time.h"
#include "worker/exchange/allreduce/coordinator_client.h"

namespace lockstep {

class GroupWatch final {
 public:
  // `coordinator` (not owned) outlives the watch; the watch is its one
  // WatchGroup caller.
  explicit GroupWatch(CoordinatorClient* coordinator)
      : coordinator_(coordinator) {}
  ~GroupWatch() { Stop(); }
  GroupWatch(const GroupWatch&) = delete;
  GroupWatch& operator=(const GroupWatch&) = delete;

  // Watches `group` past `generation` as `rank`, each call at most `poll`
  // long, until Stop or until the group moves on. `regroup` (may be null)
  // runs on the watch's thread when the group should re-form: members wait
  // to join (from then on the watch only keeps the rank alive until the
  // group moves on), it moved on, or the coordinator forgot it (it
  // restarted). Without `regroup` the watch only keeps the rank alive.
  void Start(const std::string& group, int64_t generation, int rank,
             absl::Duration poll, std::function<void()> regroup);
  // Ends the watch (a call in flight is cancelled) and joins its thread.
  void Stop();

 private:
  void Run(std::string group, int64_t generation, int rank, absl::Duration poll,
           std::function<void()> regroup);

  CoordinatorClient* const coordinator_;  // Not owned.
  std::thread thread_;
  absl::Mutex mu_;
  bool stop_ ABSL_GUARDED_BY(mu_) = false;
};

}  // namespace lockstep

#endif  // LOCKSTEP_WORKER_EXCHANGE_GROUP_WATCH_H_
