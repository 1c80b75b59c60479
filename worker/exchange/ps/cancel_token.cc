#include "worker/exchange/ps/cancel_token.h"

#include <algorithm>
#include <utility>
#include <vector>

#include "absl/time/clock.h"

namespace lockstep {

uint64_t CancelToken::Add(std::function<void()> cancel) {
  {
    absl::MutexLock lock(&mu_);
    if (!cancelled_.load()) {
      const uint64_t id = next_id_++;
      cancellers_.emplace(id, std::move(cancel));
      return id;
    }
  }
  cancel();
  return 0;
}

void CancelToken::Remove(uint64_t id) {
  absl::MutexLock lock(&mu_);
  cancellers_.erase(id);
}

void CancelToken::Cancel() {
  std::vector<std::function<void()>> cancellers;
  {
    absl::MutexLock lock(&mu_);
    cancelled_.store(true);
    for (auto& [id, cancel] : cancellers_) cancellers.push_back(cancel);
  }
  for (const std::function<void()>& cancel : cancellers) cancel();
}

absl::Time CancelToken::LeaveDeadline(const CancelToken* token,
                                      absl::Time deadline) {
  if (token == nullptr || !token->cancelled()) return deadline;
  return std::min(deadline, absl::Now() + kLeaveAfterCancel);
}

}  // namespace lockstep
