// GroupRendezvous's quorum (group_rendezvous.h): which ranks of a quorum
// group count as alive, and whether a forming round holds a majority.
#include <algorithm>
#include <string>
#include <vector>

#include "absl/container/flat_hash_map.h"
#include "server/coordination/group_rendezvous.h"

namespace lockstep {

void GroupRendezvous::Forget(const std::string& group, int rank) {
  absl::MutexLock lock(&mu_);
  auto known = groups_.find(group);
  if (known == groups_.end()) return;
  known->second.seen.erase(rank);
  known->second.left.insert(rank);  // Its watch's late end does not count.
  ++changes_;  // A round may have its majority now.
}

void GroupRendezvous::SeenLocked(const std::string& group, int rank,
                                 absl::Time now) {
  auto known = groups_.find(group);
  if (rank < 0 || known == groups_.end() || !known->second.quorum ||
      known->second.left.contains(rank)) {
    return;
  }
  absl::Time& seen = known->second.seen[rank];
  seen = std::max(seen, now);
}

bool GroupRendezvous::QuorumLocked(const std::string& group, absl::Time now,
                                   absl::Time* retry) const {
  *retry = absl::InfiniteFuture();
  const Known& known = groups_.at(group);
  if (!known.quorum) return true;
  const Round& round = rounds_.at(group);
  // The ranks outside the round that are alive: watching now, or seen
  // within the grace (and when that ends).
  absl::flat_hash_map<int, absl::Time> alive;
  for (const auto& [id, w] : watchers_) {
    if (w.group == group && w.rank >= 0 && round.by_rank.count(w.rank) == 0 &&
        !known.left.contains(w.rank)) {
      alive[w.rank] = absl::InfiniteFuture();
    }
  }
  for (const auto& [rank, seen] : known.seen) {
    if (round.by_rank.count(rank) > 0 || alive.contains(rank) ||
        seen + quorum_grace_ <= now) {
      continue;
    }
    alive[rank] = seen + quorum_grace_;
  }
  const int members = static_cast<int>(round.by_rank.size());
  const int others = static_cast<int>(alive.size());
  if (members > others) return true;
  // The clock alone gives a majority once others - members + 1 of the
  // seen ranks' graces have ended.
  std::vector<absl::Time> ends;
  for (const auto& [rank, end] : alive) {
    if (end != absl::InfiniteFuture()) ends.push_back(end);
  }
  const size_t need = static_cast<size_t>(others - members + 1);
  if (ends.size() >= need) {
    std::sort(ends.begin(), ends.end());
    *retry = ends[need - 1];
  }
  return false;
}

}  // namespace lockstep
