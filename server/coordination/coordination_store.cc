#include "server/coordination/coordination_store.h"

#include <algorithm>
#include <utility>

#include "absl/strings/ascii.h"
#include "absl/strings/match.h"
#include "absl/strings/numbers.h"
#include "absl/strings/str_cat.h"

namespace lockstep {
namespace {

absl::Status CheckKey(absl::string_view key) {
  if (key.empty()) return absl::InvalidArgumentError("empty key");
  if (key.size() > CoordinationStore::kMaxKeyBytes) {
    return absl::InvalidArgumentError(
        absl::StrCat("key of ", key.size(), " bytes exceeds the limit of ",
                     CoordinationStore::kMaxKeyBytes));
  }
  return absl::OkStatus();
}

absl::Status FullError() {
  return absl::ResourceExhaustedError(absl::StrCat(
      "the coordination store is full (at most ", CoordinationStore::kMaxKeys,
      " keys and ", CoordinationStore::kMaxTotalBytes,
      " bytes of keys and values)"));
}

absl::Status ShutDownError() {
  return absl::UnavailableError("the coordination store is shutting down");
}

}  // namespace

absl::StatusOr<bool> CoordinationStore::Set(absl::string_view key,
                                            std::string value, bool if_absent) {
  if (absl::Status s = CheckKey(key); !s.ok()) return s;
  if (value.size() > kMaxValueBytes) {
    return absl::InvalidArgumentError(
        absl::StrCat("value of ", value.size(), " bytes for key \"", key,
                     "\" exceeds the limit of ", kMaxValueBytes));
  }
  std::vector<ValueCallback> woken;
  {
    absl::MutexLock lock(&mu_);
    if (shut_down_) return ShutDownError();
    auto it = values_.find(key);
    if (it != values_.end()) {
      if (!if_absent) {
        if (bytes_ - it->second.size() + value.size() > kMaxTotalBytes) {
          return FullError();
        }
        bytes_ = bytes_ - it->second.size() + value.size();
        it->second = std::move(value);
      } else if (it->second != value) {
        return absl::AlreadyExistsError(
            absl::StrCat("key \"", key, "\" already holds a different value"));
      }
      return false;  // Only a missing key has waiters.
    }
    if (values_.size() >= kMaxKeys ||
        bytes_ + key.size() + value.size() > kMaxTotalBytes) {
      return FullError();
    }
    bytes_ += key.size() + value.size();
    // The waiters get `value` itself: a later Set may replace the stored
    // copy as soon as the lock is released.
    values_.emplace(std::string(key), value);
    woken = TakeWaitersLocked(std::string(key));
  }
  for (ValueCallback& done : woken) done(value);
  return true;
}

absl::StatusOr<std::string> CoordinationStore::TryGet(
    absl::string_view key) const {
  if (absl::Status s = CheckKey(key); !s.ok()) return s;
  absl::MutexLock lock(&mu_);
  if (shut_down_) return ShutDownError();
  auto it = values_.find(key);
  if (it == values_.end()) {
    return absl::NotFoundError(absl::StrCat("no key \"", key, "\""));
  }
  return it->second;
}

absl::StatusOr<std::string> CoordinationStore::Get(absl::string_view key,
                                                   absl::Time deadline) const {
  if (absl::Status s = CheckKey(key); !s.ok()) return s;
  struct Ready {
    const CoordinationStore* store;
    absl::string_view key;
    bool operator()() const ABSL_EXCLUSIVE_LOCKS_REQUIRED(store->mu_) {
      return store->shut_down_ || store->values_.contains(key);
    }
  };
  const Ready ready{this, key};
  absl::MutexLock lock(&mu_);
  ++blocked_gets_;
  const bool ready_in_time =
      mu_.AwaitWithDeadline(absl::Condition(&ready), deadline);
  --blocked_gets_;
  if (!ready_in_time) {
    return absl::DeadlineExceededError(
        absl::StrCat("key \"", key, "\" did not appear before the deadline"));
  }
  if (shut_down_) return ShutDownError();
  return values_.find(key)->second;
}

CoordinationStore::WaiterId CoordinationStore::GetAsync(absl::string_view key,
                                                        ValueCallback done) {
  absl::StatusOr<std::string> now;
  {
    absl::MutexLock lock(&mu_);
    if (absl::Status s = CheckKey(key); !s.ok()) {
      now = s;
    } else if (shut_down_) {
      now = ShutDownError();
    } else if (auto it = values_.find(key); it != values_.end()) {
      now = it->second;
    } else {
      const WaiterId id = next_waiter_id_++;
      waiters_.emplace(id, Waiter{std::string(key), std::move(done)});
      waiters_by_key_[std::string(key)].push_back(id);
      return id;
    }
  }
  done(std::move(now));
  return 0;
}

bool CoordinationStore::Cancel(WaiterId id) {
  absl::MutexLock lock(&mu_);
  auto it = waiters_.find(id);
  if (it == waiters_.end()) return false;
  auto by_key = waiters_by_key_.find(it->second.key);
  std::vector<WaiterId>& ids = by_key->second;
  ids.erase(std::find(ids.begin(), ids.end(), id));
  if (ids.empty()) waiters_by_key_.erase(by_key);
  waiters_.erase(it);
  return true;
}

void CoordinationStore::Shutdown() {
  std::vector<ValueCallback> failed;
  {
    absl::MutexLock lock(&mu_);
    shut_down_ = true;
    for (auto& [id, waiter] : waiters_)
      failed.push_back(std::move(waiter.done));
    waiters_.clear();
    waiters_by_key_.clear();
  }
  for (ValueCallback& done : failed) done(ShutDownError());
}

size_t CoordinationStore::ForgetGenerationsBefore(absl::string_view group,
                                                  int64_t generation) {
  // GenerationGroup's layout: "GROUP/g", the generation's digits, then "/".
  const std::string stem = absl::StrCat(group, "/g");
  absl::MutexLock lock(&mu_);
  int64_t& below = forgotten_below_[std::string(group)];
  if (generation <= below) return 0;
  below = generation;
  // Only formed groups get here, and GroupRendezvous keeps at most
  // kMaxGroups of them; past that the next call merely scans again.
  if (forgotten_below_.size() > 4096) forgotten_below_.clear();
  size_t erased = 0;
  for (auto it = values_.begin(); it != values_.end();) {
    const absl::string_view key = it->first;
    bool old = false;
    if (absl::StartsWith(key, stem)) {
      const absl::string_view rest = key.substr(stem.size());
      const size_t slash = rest.find('/');
      int64_t n = 0;
      const absl::string_view digits = rest.substr(0, slash);
      old = slash != absl::string_view::npos && !digits.empty() &&
            std::all_of(digits.begin(), digits.end(), absl::ascii_isdigit) &&
            absl::SimpleAtoi(digits, &n) && n < generation;
    }
    if (old) {
      bytes_ -= it->first.size() + it->second.size();
      values_.erase(it++);
      ++erased;
    } else {
      ++it;
    }
  }
  return erased;
}

size_t CoordinationStore::NumKeys() const {
  absl::MutexLock lock(&mu_);
  return values_.size();
}

size_t CoordinationStore::NumWaiters() const {
  absl::MutexLock lock(&mu_);
  return waiters_.size() + blocked_gets_;
}

bool CoordinationStore::AwaitNumWaiters(size_t count,
                                        absl::Time deadline) const {
  struct Reached {
    const CoordinationStore* store;
    size_t count;
    bool operator()() const ABSL_EXCLUSIVE_LOCKS_REQUIRED(store->mu_) {
      return store->waiters_.size() + store->blocked_gets_ == count;
    }
  };
  const Reached reached{this, count};
  absl::MutexLock lock(&mu_);
  return mu_.AwaitWithDeadline(absl::Condition(&reached), deadline);
}

std::vector<CoordinationStore::ValueCallback>
CoordinationStore::TakeWaitersLocked(const std::string& key) {
  std::vector<ValueCallback> woken;
  auto by_key = waiters_by_key_.find(key);
  if (by_key == waiters_by_key_.end()) return woken;
  for (WaiterId id : by_key->second) {
    auto it = waiters_.find(id);
    woken.push_back(std::move(it->second.done));
    waiters_.erase(it);
  }
  waiters_by_key_.erase(by_key);
  return woken;
}

}  // namespace lockstep
