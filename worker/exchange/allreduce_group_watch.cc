// AllReduceStepSession's watch of the coordinator (elastic groups): a
// thread that asks whether someone waits to join, and then only keeps this
// rank counted as alive for the coordinator's quorum until the group
// re-forms (docs/faults.md, "Elastic all-reduce jobs").
#include "absl/time/clock.h"
#include "worker/exchange/allreduce_step_session.h"

namespace lockstep {

void AllReduceStepSession::StartWatch() {
  {
    absl::MutexLock lock(&watch_mu_);
    watch_stop_ = false;
  }
  coordinator_->ResetWatch();
  watch_ = std::thread([this, generation = generation_] { Watch(generation); });
}

void AllReduceStepSession::StopWatch() {
  if (!watch_.joinable()) return;
  {
    absl::MutexLock lock(&watch_mu_);
    watch_stop_ = true;
  }
  coordinator_->CancelWatch();
  watch_.join();
}

void AllReduceStepSession::Watch(int64_t generation) {
  // Once told that someone waits, the watch only keeps this rank counted as
  // alive (the coordinator's quorum) until the group re-forms.
  bool alive_only = false;
  while (true) {
    absl::StatusOr<int> waiting = coordinator_->WatchGroup(
        reducer_options_.group, generation, reducer_options_.rank,
        absl::Now() + group_.watch_poll, alive_only);
    // Someone waits to join, the group moved on, or the coordinator forgot
    // it (it restarted): re-forming lets the one in, or tells the new
    // coordinator of us.
    if (waiting.ok() ||
        waiting.status().code() == absl::StatusCode::kInvalidArgument) {
      joiner_seen_ = true;
      if (!waiting.ok() || *waiting == 0 || alive_only) return;
      alive_only = true;
      continue;
    }
    if (waiting.status().code() == absl::StatusCode::kCancelled) return;
    // Away or slow: ask again, after a pause unless it just timed out.
    const absl::Duration pause =
        waiting.status().code() == absl::StatusCode::kDeadlineExceeded
            ? absl::ZeroDuration()
            : absl::Seconds(1);
    absl::MutexLock lock(&watch_mu_);
    if (watch_mu_.AwaitWithTimeout(absl::Condition(&watch_stop_), pause)) {
      return;
    }
  }
}

}  // namespace lockstep
