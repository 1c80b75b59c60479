#include "server/core/activity_log.h"

#include <algorithm>

namespace lockstep {

ActivityLog::ActivityLog(int num_workers)
    : activity_(num_workers), step_started_(num_workers) {
  absl::MutexLock lock(&mu_);
  for (int r = 0; r < num_workers; ++r) activity_[r].rank = r;
}

void ActivityLog::Note(int rank, absl::Time when, int64_t pushed_step) {
  absl::MutexLock lock(&mu_);
  if (rank < 0 || rank >= static_cast<int>(activity_.size())) return;
  WorkerActivity& a = activity_[rank];
  a.last_contact = std::max(a.last_contact, when);
  if (pushed_step <= a.last_step) return;  // Not a push, or not a new step.
  if (pushed_step == a.last_step + 1 && a.last_step >= 0) {
    a.last_step_time = when - step_started_[rank];
  }
  a.last_step = pushed_step;
  step_started_[rank] = when;
}

std::vector<WorkerActivity> ActivityLog::Get() const {
  absl::MutexLock lock(&mu_);
  return activity_;
}

}  // namespace lockstep
