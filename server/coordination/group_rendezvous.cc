#include "server/coordination/group_rendezvous.h"

#include <algorithm>
#include <utility>
#include <vector>

#include "absl/strings/str_cat.h"

namespace lockstep {
namespace {

absl::Status ShutDownError() {
  return absl::UnavailableError("the coordinator is shutting down");
}

}  // namespace

absl::Status GroupRendezvous::Check(const Request& r) const {
  if (shut_down_) return ShutDownError();
  if (r.group.empty() || r.group.size() > kMaxGroupBytes) {
    return absl::InvalidArgumentError(
        absl::StrCat("the group name must have 1 to ", kMaxGroupBytes,
                     " bytes, got ", r.group.size()));
  }
  if (r.member == 0) return absl::InvalidArgumentError("member id 0");
  if (r.size < 1 || r.size > kMaxSize) {
    return absl::InvalidArgumentError(absl::StrCat(
        "group size must be in [1, ", kMaxSize, "], got ", r.size));
  }
  if (r.rank < 0 || r.rank >= r.size) {
    return absl::InvalidArgumentError(
        absl::StrCat("rank must be in [0, ", r.size, "), got ", r.rank));
  }
  if (r.version < 0) {
    return absl::InvalidArgumentError(
        absl::StrCat("negative version ", r.version));
  }
  auto round = rounds_.find(r.group);
  if (round != rounds_.end() && round->second.size != r.size) {
    return absl::FailedPreconditionError(absl::StrCat(
        "group \"", r.group, "\" is forming with ", round->second.size,
        " ranks; this worker has --workers=", r.size));
  }
  if (!generations_.contains(r.group) && generations_.size() >= kMaxGroups) {
    return absl::ResourceExhaustedError(
        absl::StrCat("the coordinator holds ", kMaxGroups, " groups already"));
  }
  return absl::OkStatus();
}

GroupRendezvous::WaiterId GroupRendezvous::Join(const Request& request,
                                                Done done) {
  std::vector<std::pair<Done, absl::StatusOr<Group>>> answers;
  WaiterId id = 0;
  {
    absl::MutexLock lock(&mu_);
    if (absl::Status s = Check(request); !s.ok()) {
      answers.emplace_back(std::move(done), s);
    } else {
      generations_.try_emplace(request.group, 0);
      Round& round = rounds_[request.group];
      round.size = request.size;
      auto held = round.by_rank.find(request.rank);
      if (held != round.by_rank.end()) {
        // The newer process for a rank wins (as a replacement pod would).
        auto old = waiters_.find(held->second);
        answers.emplace_back(std::move(old->second.done),
                             absl::AlreadyExistsError(absl::StrCat(
                                 "replaced: another worker joined group \"",
                                 request.group, "\" as rank ", request.rank)));
        waiters_.erase(old);
      }
      id = next_id_++;
      waiters_.emplace(id, Waiter{request, std::move(done)});
      round.by_rank[request.rank] = id;
      if (static_cast<int>(round.by_rank.size()) == round.size) {
        FormLocked(request.group, &answers);
        id = 0;  // Answered below.
      }
    }
  }
  for (auto& [callback, result] : answers) callback(std::move(result));
  return id;
}

void GroupRendezvous::FormLocked(
    const std::string& group,
    std::vector<std::pair<Done, absl::StatusOr<Group>>>* done) {
  Round round = std::move(rounds_[group]);
  rounds_.erase(group);
  Group formed;
  formed.generation = ++generations_[group];
  formed.size = round.size;
  formed.version = -1;
  for (const auto& [rank, id] : round.by_rank) {
    const int64_t version = waiters_.at(id).request.version;
    formed.state_needed |= formed.version >= 0 && version != formed.version;
    if (version > formed.version) {
      formed.version = version;
      formed.source_rank = rank;  // The lowest rank at the highest version.
    }
  }
  for (const auto& [rank, id] : round.by_rank) {
    auto it = waiters_.find(id);
    Group mine = formed;
    mine.rank = rank;
    done->emplace_back(std::move(it->second.done), mine);
    waiters_.erase(it);
  }
}

bool GroupRendezvous::Cancel(WaiterId id) {
  absl::MutexLock lock(&mu_);
  auto it = waiters_.find(id);
  if (it == waiters_.end()) return false;
  const Request& r = it->second.request;
  auto round = rounds_.find(r.group);
  round->second.by_rank.erase(r.rank);
  if (round->second.by_rank.empty()) rounds_.erase(round);
  waiters_.erase(it);
  return true;
}

void GroupRendezvous::Shutdown() {
  std::vector<Done> failed;
  {
    absl::MutexLock lock(&mu_);
    shut_down_ = true;
    for (auto& [id, waiter] : waiters_)
      failed.push_back(std::move(waiter.done));
    waiters_.clear();
    rounds_.clear();
  }
  for (Done& done : failed) done(ShutDownError());
}

size_t GroupRendezvous::NumWaiting() const {
  absl::MutexLock lock(&mu_);
  return waiters_.size();
}

}  // namespace lockstep
