// Forms all-reduce groups for the Coordinator's JoinGroup
// (proto/lockstep/v1/coordination.proto), free of any transport.
//
// A group of `size` ranks forms when a member of every rank has joined;
// then every member is answered at once with the same generation (a new
// number each time the group forms, from 1), the highest version any member
// holds, and the rank that sends its state when some member is behind. A
// group re-forms this way after a failed step: the survivors and the
// replacements of the lost ranks join again (worker/exchange/
// allreduce_exchanger.h). A member that joins for a rank another waiting
// member holds replaces it, and the older one is told ALREADY_EXISTS.
//
//   GroupRendezvous rendezvous;
//   rendezvous.Join({"job", member, rank, 2, version},
//                   [](absl::StatusOr<GroupRendezvous::Group> g) {...});
//
// Thread-safe. Callbacks run on the thread of the Join that completes the
// group (or of Join itself for an immediate error, of Shutdown with
// UNAVAILABLE) and never under the internal lock.
#ifndef LOCKSTEP_SERVER_COORDINATION_GROUP_RENDEZVOUS_H_
#define LOCKSTEP_SERVER_COORDINATION_GROUP_RENDEZVOUS_H_

#include <cstdint>
#include <functional>
#include <map>
#include <string>
#include <utility>
#include <vector>

#include "absl/base/thread_annotations.h"
#include "absl/container/flat_hash_map.h"
#include "absl/status/statusor.h"
#include "absl/synchronization/mutex.h"

namespace lockstep {

class GroupRendezvous final {
 public:
  static constexpr size_t kMaxGroupBytes = 1024;
  static constexpr int kMaxSize = 4096;
  // Group names a server keeps generations for.
  static constexpr size_t kMaxGroups = 4096;

  struct Request {
    std::string group;
    uint64_t member = 0;  // Non-zero.
    int rank = 0;
    int size = 1;
    int64_t version = 0;  // Non-negative.
  };
  struct Group {
    int64_t generation = 0;
    int rank = 0;
    int size = 0;
    int64_t version = 0;
    bool state_needed = false;
    int source_rank = 0;
  };
  using Done = std::function<void(absl::StatusOr<Group>)>;
  using WaiterId = int64_t;

  GroupRendezvous() = default;
  GroupRendezvous(const GroupRendezvous&) = delete;
  GroupRendezvous& operator=(const GroupRendezvous&) = delete;

  // Joins the group's forming round. Returns an id that Cancel takes while
  // `done` has not run, or 0 when it has run here (an error, or the group
  // formed with this member). Errors: see coordination.proto.
  WaiterId Join(const Request& request, Done done);

  // Withdraws a member whose caller gave up: true when it was still
  // waiting (its callback is dropped unrun).
  bool Cancel(WaiterId id);

  // Fails every waiting member with UNAVAILABLE and refuses later calls.
  void Shutdown();

  // Members waiting now, for tests and status pages.
  size_t NumWaiting() const;

 private:
  struct Waiter {
    Request request;
    Done done;
  };
  // A forming group: its size and its waiting members by rank.
  struct Round {
    int size = 0;
    std::map<int, WaiterId> by_rank;
  };

  absl::Status Check(const Request& request) const
      ABSL_EXCLUSIVE_LOCKS_REQUIRED(mu_);
  // Answers the round's members (moved into `done`) and forgets the round.
  void FormLocked(const std::string& group,
                  std::vector<std::pair<Done, absl::StatusOr<Group>>>* done)
      ABSL_EXCLUSIVE_LOCKS_REQUIRED(mu_);

  mutable absl::Mutex mu_;
  bool shut_down_ ABSL_GUARDED_BY(mu_) = false;
  absl::flat_hash_map<std::string, Round> rounds_ ABSL_GUARDED_BY(mu_);
  absl::flat_hash_map<std::string, int64_t> generations_ ABSL_GUARDED_BY(mu_);
  absl::flat_hash_map<WaiterId, Waiter> waiters_ ABSL_GUARDED_BY(mu_);
  WaiterId next_id_ ABSL_GUARDED_BY(mu_) = 1;
};

}  // namespace lockstep

#endif  // LOCKSTEP_SERVER_COORDINATION_GROUP_RENDEZVOUS_H_
