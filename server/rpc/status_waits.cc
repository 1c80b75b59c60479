#include "server/rpc/status_waits.h"

#include <algorithm>
#include <utility>

#include "absl/time/clock.h"

namespace lockstep {

StatusWaits::StatusWaits() : thread_([this] { Loop(); }) {}

StatusWaits::~StatusWaits() {
  Close(absl::ZeroDuration());
  thread_.join();
}

void StatusWaits::Hold(absl::Duration wait, Answer answer) {
  {
    absl::MutexLock lock(&mu_);
    if (!closed_) {
      held_.push_back(
          Held{absl::Now() + std::min(wait, kMostWait), std::move(answer)});
      changed_ = true;
      return;
    }
    ++answered_after_close_;
  }
  answer();
}

std::vector<StatusWaits::Answer> StatusWaits::TakeDueLocked(absl::Time now) {
  std::vector<Answer> due;
  // Read here, where the analysis sees mu_ held, not in the lambda.
  const bool all = closed_;
  auto is_due = [&](const Held& h) { return all || h.deadline <= now; };
  for (Held& h : held_) {
    if (is_due(h)) due.push_back(std::move(h.answer));
  }
  held_.erase(std::remove_if(held_.begin(), held_.end(), is_due), held_.end());
  if (!due.empty()) last_answer_ = now;
  return due;
}

void StatusWaits::Loop() {
  absl::MutexLock lock(&mu_);
  while (!closed_) {
    absl::Time next = absl::InfiniteFuture();
    for (const Held& h : held_) next = std::min(next, h.deadline);
    changed_ = false;
    mu_.AwaitWithDeadline(absl::Condition(this, &StatusWaits::Woken), next);
    if (closed_) break;  // Close answers the rest.
    std::vector<Answer> due = TakeDueLocked(absl::Now());
    mu_.Unlock();
    for (Answer& answer : due) answer();
    mu_.Lock();
  }
}

void StatusWaits::Close(absl::Duration grace) {
  std::vector<Answer> due;
  bool watcher_between_calls = false;
  {
    absl::MutexLock lock(&mu_);
    if (closed_) return;
    const absl::Time now = absl::Now();
    watcher_between_calls =
        held_.empty() && now - last_answer_ < kRecentWatcher;
    closed_ = true;
    due = TakeDueLocked(now);
  }
  for (Answer& answer : due) answer();
  if (!watcher_between_calls || grace <= absl::ZeroDuration()) return;
  absl::MutexLock lock(&mu_);
  mu_.AwaitWithTimeout(absl::Condition(this, &StatusWaits::CameBack), grace);
}

}  // namespace lockstep
