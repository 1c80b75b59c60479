#include "server/core/membership.h"

#include <fcntl.h>
#include <sys/random.h>
#include <unistd.h>

#include <algorithm>
#include <cerrno>
#include <cstdint>

#include "absl/strings/str_cat.h"

namespace lockstep {
namespace {

// 62 bits from the kernel's CSPRNG, not counted up (see the class comment).
// Positive: 0 means "none".
absl::StatusOr<int64_t> RandomIncarnation() {
  uint64_t bits = 0;
  ssize_t got;
  do {
    got = getrandom(&bits, sizeof(bits), 0);
  } while (got < 0 && errno == EINTR);
  if (got != static_cast<ssize_t>(sizeof(bits))) {
    // No getrandom (an old kernel, a seccomp profile): the device.
    const int fd = open("/dev/urandom", O_RDONLY | O_CLOEXEC);
    got = fd < 0 ? -1 : read(fd, &bits, sizeof(bits));
    if (fd >= 0) close(fd);
    if (got != static_cast<ssize_t>(sizeof(bits))) {
      return absl::InternalError(
          "no random bytes for an incarnation (getrandom and /dev/urandom "
          "both failed)");
    }
  }
  return static_cast<int64_t>(bits >> 2) + 1;
}

}  // namespace

Membership::Membership(int num_workers, int64_t server_incarnation)
    : num_workers_(num_workers),
      server_incarnation_(server_incarnation),
      incarnations_(num_workers, 0),
      left_(num_workers, false),
      notes_(num_workers) {}

absl::Status Membership::Check(int rank, int64_t incarnation) const {
  absl::MutexLock lock(&mu_);
  return CheckLocked(rank, incarnation);
}

absl::Status Membership::CheckLocked(int rank, int64_t incarnation) const {
  if (rank < 0 || rank >= num_workers_) {
    return absl::FailedPreconditionError(absl::StrCat(
        "unknown rank ", rank, " (job has ", num_workers_, " workers)"));
  }
  if (auto it = revoked_.find(incarnation); it != revoked_.end()) {
    return it->second;
  }
  if (incarnations_[rank] == 0) {
    return absl::NotFoundError(absl::StrCat(
        "rank ", rank, " is not registered with this server (server ",
        server_incarnation_, "); it may have restarted"));
  }
  if (incarnations_[rank] != incarnation) {
    // Never issued here for this rank (one that was, and was replaced, is
    // in revoked_). Not the current incarnation in the message: it is what
    // lets a call count for the rank.
    return absl::PermissionDeniedError(absl::StrCat(
        "rank ", rank, " incarnation ", incarnation,
        " was not issued by this server (server ", server_incarnation_,
        ") for rank ", rank,
        ": made up, another rank's, or from before this server started"));
  }
  return absl::OkStatus();
}

absl::StatusOr<int64_t> Membership::Admit(int rank) {
  absl::MutexLock lock(&mu_);
  int64_t incarnation = 0;
  do {
    absl::StatusOr<int64_t> drawn = RandomIncarnation();
    if (!drawn.ok()) return drawn.status();
    incarnation = *drawn;
  } while (revoked_.contains(incarnation) ||
           std::find(incarnations_.begin(), incarnations_.end(), incarnation) !=
               incarnations_.end());
  if (incarnations_[rank] != 0) {
    revoked_[incarnations_[rank]] = absl::AlreadyExistsError(absl::StrCat(
        "rank ", rank, " incarnation ", incarnations_[rank],
        " was replaced: another worker registered as rank ", rank));
  }
  incarnations_[rank] = incarnation;
  left_[rank] = false;
  notes_[rank] = LeaveNote();
  return incarnation;
}

void Membership::RevokeFrom(int first, const absl::Status& why) {
  absl::MutexLock lock(&mu_);
  for (int r = first; r < num_workers_; ++r) {
    if (incarnations_[r] != 0) revoked_[incarnations_[r]] = why;
    incarnations_[r] = 0;
  }
}

void Membership::RevokeAllButRankZero(const std::string& reason) {
  RevokeFrom(1, absl::FailedPreconditionError(reason));
}

void Membership::RevokeAll(const std::string& reason) {
  RevokeFrom(0, absl::AbortedError(reason));
}

void Membership::Evict(absl::Span<const int> ranks, int64_t step) {
  absl::MutexLock lock(&mu_);
  for (int r : ranks) {
    if (incarnations_[r] == 0) continue;
    revoked_[incarnations_[r]] = absl::AbortedError(
        absl::StrCat("rank ", r, " was evicted: it did not push step ", step,
                     " within the step timeout; register again"));
    incarnations_[r] = 0;
  }
}

absl::StatusOr<bool> Membership::Leave(int rank, int64_t incarnation,
                                       const LeaveNote& note) {
  absl::MutexLock lock(&mu_);
  bool member = true;
  if (incarnation == 0 && rank >= 0 && rank < num_workers_ &&
      (incarnations_[rank] == 0 || left_[rank])) {
    member = false;
  } else if (absl::Status s = CheckLocked(rank, incarnation); !s.ok()) {
    return s;
  }
  left_[rank] = true;
  // The last word counts: an elastic group that finished the job leaves
  // for its absent ranks, and a failure of one of them (a joiner refused)
  // no longer fails the job.
  notes_[rank] = note;
  if (notes_[rank].detail.size() > kMaxLeaveDetailBytes) {
    notes_[rank].detail.resize(kMaxLeaveDetailBytes);
  }
  return member;
}

bool Membership::Returned(int rank) {
  absl::MutexLock lock(&mu_);
  // Only a rank that stopped (a signal) or failed comes back: one that
  // finished, or that a finishing group left for (no reason given), ended
  // with the job, and a late process for it must not revive a job that is
  // over.
  if (rank < 0 || rank >= num_workers_ || incarnations_[rank] != 0 ||
      !left_[rank] ||
      (notes_[rank].reason != LeaveReason::kStopped &&
       notes_[rank].reason != LeaveReason::kFailed)) {
    return false;
  }
  left_[rank] = false;
  notes_[rank] = LeaveNote();
  return true;
}

std::vector<std::pair<int, LeaveNote>> Membership::Ends(
    LeaveReason reason) const {
  absl::MutexLock lock(&mu_);
  std::vector<std::pair<int, LeaveNote>> ends;
  for (int r = 0; r < num_workers_; ++r) {
    if (left_[r] && notes_[r].reason == reason) ends.emplace_back(r, notes_[r]);
  }
  return ends;
}

void Membership::Roster(std::vector<int>* registered,
                        std::vector<int>* left) const {
  absl::MutexLock lock(&mu_);
  for (int r = 0; r < num_workers_; ++r) {
    if (incarnations_[r] != 0) registered->push_back(r);
    if (left_[r]) left->push_back(r);
  }
}

bool Membership::WaitUntilAllLeft(absl::Duration timeout) const {
  absl::MutexLock lock(&mu_);
  auto all_left = [this]() ABSL_EXCLUSIVE_LOCKS_REQUIRED(mu_) {
    return std::all_of(left_.begin(), left_.end(), [](bool f) { return f; });
  };
  return mu_.AwaitWithTimeout(absl::Condition(&all_left), timeout);
}

}  // namespace lockstep
