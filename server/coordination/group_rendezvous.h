// Forms all-reduce groups for the Coordinator's JoinGroup and WatchGroup
// (proto/lockstep/v1/coordination.proto), free of any transport.
//
// Members join a group's forming round under their rank (their identity in
// the job, in [0, size)). The round forms at once when every rank has
// joined, or with min_size or more members once `settle` has passed since
// the last one joined (an elastic job going on with fewer). Then every
// member is answered at once with the same generation (a new number each
// time the group forms, from 1), the members' ranks in order (a member's
// index there is its place in the group), the highest version any member
// holds, and the index of the member that sends its state when some member
// is behind. A group's size, minimum and model signature are those its
// first member gave: a member that differs is refused (FAILED_PRECONDITION). A
// group re-forms this way after a failed step, and when a group of fewer than
// every rank lets a joiner in: Watch tells its members that someone waits. A
// member that joins for a rank another waiting member holds replaces it, and
// the older one is told ALREADY_EXISTS.
//
// A quorum group (Request::quorum: elastic all-reduce and PS groups) forms
// a generation of fewer than every rank only when the round holds more
// than half of the ranks alive: its own members and those outside it that
// watch the group under their rank, or were seen within `quorum_grace`
// (formed into a generation, or their watch ended). Two disjoint groups
// can then never both form while the other's members are alive: the
// minority waits, its Join wakes the watchers, and they join it at their
// next step. Ranks that are gone stop counting `quorum_grace` after their
// watch ended (their connection closed, or its deadline passed for a
// stopped process).
//
//   GroupRendezvous rendezvous;
//   rendezvous.Join({"job", member, rank, 2, version},
//                   [](absl::StatusOr<GroupRendezvous::Group> g) {...});
//
// Thread-safe. Callbacks never run under the internal lock: they run on the
// thread of the Join that completes a group (or of Join itself for an
// immediate error), of the settle timer's own thread, or of Shutdown (with
// UNAVAILABLE).
#ifndef LOCKSTEP_SERVER_COORDINATION_GROUP_RENDEZVOUS_H_
#define LOCKSTEP_SERVER_COORDINATION_GROUP_RENDEZVOUS_H_

#include <cstdint>
#include <functional>
#include <map>
#include <string>
#include <thread>
#include <utility>
#include <vector>

#include "absl/base/thread_annotations.h"
#include "absl/container/flat_hash_map.h"
#include "absl/container/flat_hash_set.h"
#include "absl/status/statusor.h"
#include "absl/synchronization/mutex.h"
#include "absl/time/time.h"
#include "common/rpc/group_membership.h"

namespace lockstep {

class GroupRendezvous final {
 public:
  static constexpr size_t kMaxGroupBytes = 1024;
  static constexpr int kMaxSize = 4096;
  // Group names a server keeps generations for.
  static constexpr size_t kMaxGroups = 4096;
  static constexpr absl::Duration kMaxSettle = absl::Minutes(10);
  static constexpr size_t kMaxSignatureBytes = size_t{1} << 20;
  // How long a quorum group's rank counts as alive once last seen.
  static constexpr absl::Duration kQuorumGrace = absl::Seconds(5);

  using Request = GroupRequest;
  using Group = GroupView;
  using Done = std::function<void(absl::StatusOr<Group>)>;
  // Watch's: the members waiting for the next generation.
  using WatchDone = std::function<void(absl::StatusOr<int>)>;
  using WaiterId = int64_t;

  // Told (group, generation, members' ranks) when a group forms that
  // generation, and (group, generation, none) when a member joins a formed
  // group, which must then form the next one: an elastic PS job's servers
  // refuse older generations' pushes (ParameterServer::RequireGeneration),
  // and a member that left the job before and is in a group again trains
  // (ParameterServer::Returned). Runs outside the lock, before the members
  // it concerns are answered. May be null.
  using GenerationObserver =
      std::function<void(const std::string& group, int64_t generation,
                          const std::vector<int>& members)>;

  explicit GroupRendezvous(GenerationObserver observer = nullptr,
                           absl::Duration quorum_grace = kQuorumGrace);
  ~GroupRendezvous();  // Shuts down.
  GroupRendezvous(const GroupRendezvous&) = delete;
  GroupRendezvous& operator=(const GroupRendezvous&) = delete;

  // Joins the group's forming round. Returns an id that Cancel takes while
  // `done` has not run, or 0 when it has run here (an error, or the group
  // formed with this member). Errors: see coordination.proto.
  WaiterId Join(const Request& request, Done done);

  // `done` gets the count of members waiting to form a generation of
  // `group` after `generation` as soon as there are some, or 0 once the
  // group has formed past `generation` (at once where either holds; 0 is
  // returned then). Watching an unknown group is INVALID_ARGUMENT. A
  // `rank` in the group's range counts as alive while the watch is open
  // (see the top); -1: the caller does not say. With `alive_only` the
  // watch is not answered when members wait, only once the group has
  // formed past `generation`: it only keeps the rank counted as alive.
  WaiterId Watch(const std::string& group, int64_t generation, WatchDone done,
                 int rank = -1, bool alive_only = false);

  // A quorum group's `rank` left the job: it no longer counts as alive.
  void Forget(const std::string& group, int rank);

  // Withdraws a member or a watch whose caller gave up: true when it was
  // still waiting (its callback is dropped unrun).
  bool Cancel(WaiterId id);

  // Fails every waiter with UNAVAILABLE and refuses later calls.
  void Shutdown();

  // Members waiting now, for tests and status pages.
  size_t NumWaiting() const;

 private:
  struct Member {
    Request request;
    Done done;
  };
  struct Watcher {
    std::string group;
    int64_t generation = 0;
    WatchDone done;
    int rank = -1;
    bool alive_only = false;
  };
  // A forming group (its size and minimum are its Known's): its waiting
  // members by rank.
  struct Round {
    absl::Duration settle;
    absl::Time last_join;
    std::map<int, WaiterId> by_rank;
  };
  // Callbacks to run once the lock is released.
  struct Answers {
    std::vector<std::pair<Done, absl::StatusOr<Group>>> members;
    std::vector<std::pair<WatchDone, absl::StatusOr<int>>> watchers;
    struct Generation {
      std::string group;
      int64_t generation;
      std::vector<int> members;  // Empty: not formed yet.
    };
    std::vector<Generation> generations;  // Observed.
    void Run(const GenerationObserver& observer);
  };

  absl::Status Check(const Request& request) const
      ABSL_EXCLUSIVE_LOCKS_REQUIRED(mu_);
  // Answers the round's members and forgets the round.
  void FormLocked(const std::string& group, Answers* answers)
      ABSL_EXCLUSIVE_LOCKS_REQUIRED(mu_);
  // Answers the group's watchers: someone waits, or the group moved on.
  void WakeWatchersLocked(const std::string& group, Answers* answers)
      ABSL_EXCLUSIVE_LOCKS_REQUIRED(mu_);
  // Whether the group's round may form now by the quorum rule (always, for
  // a group without one); if not, sets `*retry` to when the clock alone may
  // change that (InfiniteFuture: only a join or a watch may).
  bool QuorumLocked(const std::string& group, absl::Time now,
                    absl::Time* retry) const ABSL_EXCLUSIVE_LOCKS_REQUIRED(mu_);
  // A quorum group's rank was alive at `now`.
  void SeenLocked(const std::string& group, int rank, absl::Time now)
      ABSL_EXCLUSIVE_LOCKS_REQUIRED(mu_);
  // The settle timer: forms rounds whose settle time has passed.
  void SettleLoop();

  mutable absl::Mutex mu_;
  bool shut_down_ ABSL_GUARDED_BY(mu_) = false;
  // Bumped by every change that may move the settle timer's next deadline.
  int64_t changes_ ABSL_GUARDED_BY(mu_) = 0;
  absl::flat_hash_map<std::string, Round> rounds_ ABSL_GUARDED_BY(mu_);
  // What a server keeps of each group it has seen: the size and minimum
  // its first member gave (every later one must give the same, so that a
  // misconfigured joiner is refused, not the group), and its generations.
  struct Known {
    int size = 0;
    int min_size = 0;
    std::string signature;
    int64_t generation = 0;
    bool quorum = false;
    // Quorum groups: when each rank was last seen alive (formed into a
    // generation, or its watch ended), and the ranks that left the job
    // (not seen again until they join).
    absl::flat_hash_map<int, absl::Time> seen;
    absl::flat_hash_set<int> left;
  };
  absl::flat_hash_map<std::string, Known> groups_ ABSL_GUARDED_BY(mu_);
  absl::flat_hash_map<WaiterId, Member> members_ ABSL_GUARDED_BY(mu_);
  absl::flat_hash_map<WaiterId, Watcher> watchers_ ABSL_GUARDED_BY(mu_);
  WaiterId next_id_ ABSL_GUARDED_BY(mu_) = 1;
  const GenerationObserver observer_;
  const absl::Duration quorum_grace_;
  std::thread settle_thread_;
};

}  // namespace lockstep

#endif  // LOCKSTEP_SERVER_COORDINATION_GROUP_RENDEZVOUS_H_
