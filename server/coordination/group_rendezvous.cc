#include "server/coordination/group_rendezvous.h"

#include <algorithm>
#include <utility>
#include <vector>

#include "absl/strings/str_cat.h"
#include "absl/time/clock.h"
#include "common/model/signature_proto.h"

namespace lockstep {
namespace {

absl::Status ShutDownError() {
  return absl::UnavailableError("the coordinator is shutting down");
}

int MinSize(const GroupRendezvous::Request& r) {
  return r.min_size == 0 ? r.size : r.min_size;
}

// How the model signature `got` differs from the group's `expected` (both
// serialized lockstep.v1.ModelSignature messages); empty when they describe
// the same model.
std::string DescribeSignatures(const std::string& expected,
                               const std::string& got) {
  if (got == expected) return "";
  v1::ModelSignature a, b;
  if (!a.ParseFromString(expected) || !b.ParseFromString(got)) {
    return "a signature that does not parse";
  }
  absl::StatusOr<ModelSignature> want = SignatureFromProto(a);
  absl::StatusOr<ModelSignature> have = SignatureFromProto(b);
  if (!want.ok() || !have.ok()) return "a signature with an unknown setting";
  return DescribeDifference(*want, *have);
}

// The request's own fields, before any group is looked at.
absl::Status CheckFields(const GroupRendezvous::Request& r) {
  using G = GroupRendezvous;
  if (r.group.empty() || r.group.size() > G::kMaxGroupBytes) {
    return absl::InvalidArgumentError(
        absl::StrCat("the group name must have 1 to ", G::kMaxGroupBytes,
                     " bytes, got ", r.group.size()));
  }
  // The coordinator keeps a generation's records under "GROUP/gN/"
  // (GenerationGroup) and forgets older generations' by that prefix: a
  // "/" in a name would make one group's keys look like another's.
  if (r.group.find('/') != std::string::npos) {
    return absl::InvalidArgumentError(absl::StrCat(
        "the group name may not contain '/', got \"", r.group, "\""));
  }
  if (r.member == 0) return absl::InvalidArgumentError("member id 0");
  if (r.size < 1 || r.size > G::kMaxSize) {
    return absl::InvalidArgumentError(absl::StrCat(
        "group size must be in [1, ", G::kMaxSize, "], got ", r.size));
  }
  if (r.rank < 0 || r.rank >= r.size) {
    return absl::InvalidArgumentError(
        absl::StrCat("rank must be in [0, ", r.size, "), got ", r.rank));
  }
  if (r.min_size < 0 || r.min_size > r.size) {
    return absl::InvalidArgumentError(
        absl::StrCat("the minimum group size must be in [1, ", r.size,
                     "], got ", r.min_size));
  }
  if (r.version < 0) {
    return absl::InvalidArgumentError(
        absl::StrCat("negative version ", r.version));
  }
  if (r.settle < absl::ZeroDuration() || r.settle > G::kMaxSettle) {
    return absl::InvalidArgumentError(absl::StrCat(
        "the settle time must be in [0, ", absl::FormatDuration(G::kMaxSettle),
        "], got ", absl::FormatDuration(r.settle)));
  }
  if (r.signature.size() > G::kMaxSignatureBytes) {
    return absl::InvalidArgumentError(
        absl::StrCat("a model signature of ", r.signature.size(),
                     " bytes exceeds ", G::kMaxSignatureBytes));
  }
  return absl::OkStatus();
}

}  // namespace

void GroupRendezvous::Answers::Run(const GenerationObserver& observer) {
  if (observer) {
    for (const Generation& g : generations) {
      observer(g.group, g.generation, g.members);
    }
  }
  for (auto& [done, result] : members) done(std::move(result));
  for (auto& [done, result] : watchers) done(std::move(result));
}

GroupRendezvous::GroupRendezvous(GenerationObserver observer,
                                 absl::Duration quorum_grace)
    : observer_(std::move(observer)),
      quorum_grace_(quorum_grace),
      settle_thread_([this] { SettleLoop(); }) {}

GroupRendezvous::~GroupRendezvous() {
  Shutdown();
  settle_thread_.join();
}

absl::Status GroupRendezvous::Check(const Request& r) const {
  if (shut_down_) return ShutDownError();
  if (absl::Status s = CheckFields(r); !s.ok()) return s;
  auto known = groups_.find(r.group);
  if (known == groups_.end()) {
    if (groups_.size() < kMaxGroups) return absl::OkStatus();
    return absl::ResourceExhaustedError(
        absl::StrCat("the coordinator holds ", kMaxGroups, " groups already"));
  }
  const Known& group = known->second;
  if (group.size != r.size || group.min_size != MinSize(r)) {
    return absl::FailedPreconditionError(
        absl::StrCat("group \"", r.group, "\" has ", group.min_size, " to ",
                     group.size, " ranks; this worker has ", MinSize(r), " to ",
                     r.size, " (--min_workers, --workers)"));
  }
  if (r.signature.empty() || group.signature.empty()) return absl::OkStatus();
  const std::string difference =
      DescribeSignatures(group.signature, r.signature);
  if (difference.empty()) return absl::OkStatus();
  return absl::FailedPreconditionError(
      absl::StrCat("this worker's model differs from group \"", r.group,
                   "\"'s: ", difference));
}

GroupRendezvous::WaiterId GroupRendezvous::Join(const Request& request,
                                                Done done) {
  Answers answers;
  WaiterId id = 0;
  {
    absl::MutexLock lock(&mu_);
    if (absl::Status s = Check(request); !s.ok()) {
      answers.members.emplace_back(std::move(done), s);
    } else {
      auto [it, added] = groups_.try_emplace(request.group);
      Known& known = it->second;
      if (added) {
        known.size = request.size;
        known.min_size = MinSize(request);
        known.signature = request.signature;
      }
      known.quorum |= request.quorum;
      known.left.erase(request.rank);  // A rank that left is back.
      // A member of a formed group wants the next one: every member must
      // re-form (a joiner, or a member whose step failed).
      if (known.generation > 0) {
        answers.generations.push_back(
            {request.group, known.generation + 1, {}});
      }
      Round& round = rounds_[request.group];
      round.settle = request.settle;
      round.last_join = absl::Now();
      auto held = round.by_rank.find(request.rank);
      if (held != round.by_rank.end()) {
        // The newer process for a rank wins (as a replacement pod would).
        auto old = members_.find(held->second);
        answers.members.emplace_back(
            std::move(old->second.done),
            absl::AlreadyExistsError(
                absl::StrCat("replaced: another worker joined group \"",
                             request.group, "\" as rank ", request.rank)));
        members_.erase(old);
      }
      id = next_id_++;
      members_.emplace(id, Member{request, std::move(done)});
      round.by_rank[request.rank] = id;
      ++changes_;
      if (static_cast<int>(round.by_rank.size()) == request.size) {
        FormLocked(request.group, &answers);
        id = 0;  // Answered below.
      } else {
        WakeWatchersLocked(request.group, &answers);
      }
    }
  }
  answers.Run(observer_);
  return id;
}

void GroupRendezvous::FormLocked(const std::string& group, Answers* answers) {
  Round round = std::move(rounds_[group]);
  rounds_.erase(group);
  Group formed;
  formed.generation = ++groups_.at(group).generation;
  const absl::Time now = absl::Now();
  for (const auto& [rank, id] : round.by_rank) SeenLocked(group, rank, now);
  formed.version = -1;
  for (const auto& [rank, id] : round.by_rank) {
    const int64_t version = members_.at(id).request.version;
    formed.state_needed |= formed.version >= 0 && version != formed.version;
    if (version > formed.version) {
      formed.version = version;
      // The lowest index at the highest version.
      formed.source_index = static_cast<int>(formed.members.size());
    }
    formed.members.push_back(rank);
  }
  answers->generations.push_back({group, formed.generation, formed.members});
  int index = 0;
  for (const auto& [rank, id] : round.by_rank) {
    auto it = members_.find(id);
    Group mine = formed;
    mine.index = index++;
    answers->members.emplace_back(std::move(it->second.done), std::move(mine));
    members_.erase(it);
  }
  WakeWatchersLocked(group, answers);
}

void GroupRendezvous::WakeWatchersLocked(const std::string& group,
                                         Answers* answers) {
  const int64_t generation = groups_.at(group).generation;
  auto round = rounds_.find(group);
  const int waiting = round == rounds_.end()
                          ? 0
                          : static_cast<int>(round->second.by_rank.size());
  const absl::Time now = absl::Now();
  for (auto it = watchers_.begin(); it != watchers_.end();) {
    Watcher& w = it->second;
    if (w.group == group &&
        (generation > w.generation || (waiting > 0 && !w.alive_only))) {
      SeenLocked(group, w.rank, now);
      answers->watchers.emplace_back(std::move(w.done),
                                     generation > w.generation ? 0 : waiting);
      watchers_.erase(it++);
    } else {
      ++it;
    }
  }
}

GroupRendezvous::WaiterId GroupRendezvous::Watch(const std::string& group,
                                                 int64_t generation,
                                                 WatchDone done, int rank,
                                                 bool alive_only) {
  Answers answers;
  WaiterId id = 0;
  {
    absl::MutexLock lock(&mu_);
    if (shut_down_) {
      answers.watchers.emplace_back(std::move(done), ShutDownError());
    } else if (!groups_.contains(group)) {
      answers.watchers.emplace_back(
          std::move(done), absl::InvalidArgumentError(absl::StrCat(
                               "no group \"", group, "\" has formed here")));
    } else {
      id = next_id_++;
      const int size = groups_.at(group).size;
      watchers_.emplace(id, Watcher{group, generation, std::move(done),
                                    rank >= 0 && rank < size ? rank : -1,
                                    alive_only});
      WakeWatchersLocked(group, &answers);
      if (!answers.watchers.empty()) id = 0;
    }
  }
  answers.Run(observer_);
  return id;
}

bool GroupRendezvous::Cancel(WaiterId id) {
  absl::MutexLock lock(&mu_);
  if (auto w = watchers_.find(id); w != watchers_.end()) {
    // The watcher gave up (its deadline, or its process went): alive for
    // the grace from now, which the settle timer must then look at.
    SeenLocked(w->second.group, w->second.rank, absl::Now());
    watchers_.erase(w);
    ++changes_;
    return true;
  }
  auto it = members_.find(id);
  if (it == members_.end()) return false;
  const Request& r = it->second.request;
  auto round = rounds_.find(r.group);
  round->second.by_rank.erase(r.rank);
  if (round->second.by_rank.empty()) rounds_.erase(round);
  members_.erase(it);
  ++changes_;
  return true;
}

void GroupRendezvous::SettleLoop() {
  struct Changed {
    const GroupRendezvous* self;
    int64_t seen;
    bool operator()() const ABSL_EXCLUSIVE_LOCKS_REQUIRED(self->mu_) {
      return self->shut_down_ || self->changes_ != seen;
    }
  };
  absl::MutexLock lock(&mu_);
  while (!shut_down_) {
    // The earliest time a round may form with fewer than every rank: its
    // settle time, then (a quorum group) when its majority may come.
    absl::Time next = absl::InfiniteFuture();
    const absl::Time before = absl::Now();
    for (const auto& [name, round] : rounds_) {
      if (static_cast<int>(round.by_rank.size()) < groups_.at(name).min_size) {
        continue;
      }
      absl::Time due = round.last_join + round.settle;
      absl::Time retry;
      if (before >= due && !QuorumLocked(name, before, &retry)) due = retry;
      next = std::min(next, due);
    }
    const Changed changed{this, changes_};
    mu_.AwaitWithDeadline(absl::Condition(&changed), next);
    if (shut_down_) break;
    const absl::Time now = absl::Now();
    std::vector<std::string> due;
    for (const auto& [name, round] : rounds_) {
      absl::Time retry;
      if (static_cast<int>(round.by_rank.size()) >= groups_.at(name).min_size &&
          now >= round.last_join + round.settle &&
          QuorumLocked(name, now, &retry)) {
        due.push_back(name);
      }
    }
    Answers answers;
    for (const std::string& name : due) FormLocked(name, &answers);
    if (answers.members.empty() && answers.watchers.empty()) continue;
    mu_.Unlock();
    answers.Run(observer_);
    mu_.Lock();
  }
}

void GroupRendezvous::Shutdown() {
  Answers answers;
  {
    absl::MutexLock lock(&mu_);
    shut_down_ = true;
    for (auto& [id, member] : members_) {
      answers.members.emplace_back(std::move(member.done), ShutDownError());
    }
    for (auto& [id, watcher] : watchers_) {
      answers.watchers.emplace_back(std::move(watcher.done), ShutDownError());
    }
    members_.clear();
    watchers_.clear();
    rounds_.clear();
  }
  answers.Run(observer_);
}

size_t GroupRendezvous::NumWaiting() const {
  absl::MutexLock lock(&mu_);
  return members_.size();
}

}  // namespace lockstep
