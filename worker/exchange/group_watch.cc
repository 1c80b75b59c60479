#include "worker/exchange/group_watch.h"

#include <utility>

#include "absl/time/clock.h"

namespace lockstep {

void GroupWatch::Start(const std::string& group, int64_t generation, int rank,
                       absl::Duration poll, std::function<void()> regroup) {
  Stop();
  {
    absl::MutexLock lock(&mu_);
    stop_ = false;
  }
  coordinator_->ResetWatch();
  thread_ = std::thread([this, group, generation, rank, poll,
                         regroup = std::move(regroup)]() mutable {
    Run(std::move(group), generation, rank, poll, std::move(regroup));
  });
}

void GroupWatch::Stop() {
  if (!thread_.joinable()) return;
  {
    absl::MutexLock lock(&mu_);
    stop_ = true;
  }
  coordinator_->CancelWatch();
  thread_.join();
}

void GroupWatch::Run(std::string group, int64_t generation, int rank,
                     absl::Duration poll, std::function<void()> regroup) {
  // Once told that someone waits (or with nothing to tell), the watch only
  // keeps this rank counted as alive until the group re-forms.
  bool alive_only = regroup == nullptr;
  while (true) {
    absl::StatusOr<int> waiting = coordinator_->WatchGroup(
        group, generation, rank, absl::Now() + poll, alive_only);
    // Someone waits to join, the group moved on, or the coordinator forgot
    // it (it restarted): re-forming lets the one in, or tells the new
    // coordinator of us.
    if (waiting.ok() ||
        waiting.status().code() == absl::StatusCode::kInvalidArgument) {
      if (regroup != nullptr) regroup();
      if (!waiting.ok() || *waiting == 0 || alive_only) return;
      alive_only = true;
      continue;
    }
    // Away or slow, or a call the coordinator cut off as it stopped: ask
    // again (after a pause unless it just timed out), unless Stop asked.
    const absl::Duration pause =
        waiting.status().code() == absl::StatusCode::kDeadlineExceeded
            ? absl::ZeroDuration()
            : absl::Seconds(1);
    absl::MutexLock lock(&mu_);
    if (mu_.AwaitWithTimeout(absl::Condition(&stop_), pause)) return;
  }
}

}  // namespace lockstep
