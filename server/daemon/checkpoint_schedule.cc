#include "server/daemon/checkpoint_schedule.h"

#include <algorithm>

namespace lockstep {
namespace {

constexpr absl::Duration kFirstRetry = absl::Seconds(5);
constexpr absl::Duration kLongestRetry = absl::Minutes(5);

}  // namespace

CheckpointSchedule::CheckpointSchedule(int64_t every_steps,
                                       absl::Duration every, absl::Time start)
    : every_steps_(every_steps), every_(every), last_saved_(start) {}

bool CheckpointSchedule::Due(int64_t version, absl::Time now,
                             bool by_steps) const {
  if (version <= last_saved_version_ || now < retry_at_) return false;
  const bool steps_due =
      by_steps && every_steps_ > 0 &&
      version - std::max<int64_t>(last_saved_version_, 0) >= every_steps_;
  const bool time_due =
      every_ > absl::ZeroDuration() && now - last_saved_ >= every_;
  return steps_due || time_due;
}

void CheckpointSchedule::Saved(int64_t version, absl::Time at) {
  // A pinned version may be written after a newer one saved by the clock.
  last_saved_version_ = std::max(last_saved_version_, version);
  last_saved_ = at;
  backoff_ = absl::ZeroDuration();
  retry_at_ = absl::InfinitePast();
}

absl::Duration CheckpointSchedule::Failed(absl::Time now) {
  backoff_ = std::min(kLongestRetry, std::max(kFirstRetry, 2 * backoff_));
  retry_at_ = now + backoff_;
  return backoff_;
}

}  // namespace lockstep
