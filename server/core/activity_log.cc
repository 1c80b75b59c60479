#include "server/core/activity_log.h"

#include <algorithm>

namespace lockstep {
namespace {

// A worker's report is its own clock's word: a value past an hour is not a
// step's phase, and is dropped rather than let it skew the medians.
constexpr int64_t kMaxReportUs = int64_t{3600} * 1000 * 1000;

// A rank whose last push is older than this, and than 4 of its steps, is
// out of the window's count.
constexpr absl::Duration kStale = absl::Seconds(2);

template <typename T>
void Keep(std::deque<T>* window, const T& value) {
  window->push_back(value);
  if (window->size() > ActivityLog::kWindow) window->pop_front();
}

template <typename T, typename Field>
absl::Duration Median(const std::deque<T>& window, Field field) {
  if (window.empty()) return absl::ZeroDuration();
  std::vector<absl::Duration> v;
  for (const T& x : window) v.push_back(field(x));
  std::sort(v.begin(), v.end());
  const size_t n = v.size();
  return n % 2 == 1 ? v[n / 2] : (v[n / 2 - 1] + v[n / 2]) / 2;
}

bool Plausible(const StepReport& r) {
  for (int64_t us : {r.input_us, r.compute_us, r.push_us, r.wait_us}) {
    if (us < 0 || us > kMaxReportUs) return false;
  }
  return r.step >= 0;
}

}  // namespace

ActivityLog::ActivityLog(int num_workers)
    : activity_(num_workers), samples_(num_workers) {
  absl::MutexLock lock(&mu_);
  for (int r = 0; r < num_workers; ++r) activity_[r].rank = r;
}

void ActivityLog::CloseStep(Samples* s, absl::Time next_first) {
  for (const auto& [step, first] : opened_) {
    if (step == s->step) {
      Keep(&s->lateness, s->last - first);
      break;
    }
  }
  if (next_first != absl::InfinitePast()) {
    Keep(&s->step_time, next_first - s->first);
  }
}

void ActivityLog::Reset(Samples* s) {
  // The steps opened by the run this rank was in (at or before its last
  // push) open anew; those opened since (by ranks that went back before
  // it) stay.
  const absl::Time old_last = s->last;
  opened_.erase(
      std::remove_if(opened_.begin(), opened_.end(),
                     [&](const auto& o) { return o.second <= old_last; }),
      opened_.end());
  *s = Samples();
}

void ActivityLog::Note(int rank, absl::Time when, int64_t pushed_step,
                       const StepReport& report) {
  absl::MutexLock lock(&mu_);
  if (rank < 0 || rank >= static_cast<int>(activity_.size())) return;
  WorkerActivity& a = activity_[rank];
  a.last_contact = std::max(a.last_contact, when);
  if (pushed_step == kNotAPush) return;
  Samples& s = samples_[rank];
  if (pushed_step < s.step - 1) {
    // Steps went back (the shards stepped back to a common checkpoint, or
    // an async worker started again): what the window holds is of another
    // run of these steps.
    Reset(&s);
  }
  if (report.step > s.reported && Plausible(report)) {
    s.reported = report.step;
    Keep(&s.reports, report);
  }
  if (pushed_step == s.step) {
    s.last = std::max(s.last, when);
    return;
  }
  if (pushed_step < s.step) {
    return;  // A re-sent push of the step before.
  } else if (s.step >= 0) {
    // A new step: the previous one is over for this rank.
    CloseStep(&s, pushed_step == s.step + 1 ? when : absl::InfinitePast());
  }
  auto opened = std::find_if(opened_.begin(), opened_.end(),
                             [&](const auto& o) { return o.first == pushed_step; });
  if (opened == opened_.end()) {
    opened_.emplace_back(pushed_step, when);
    // Kept sorted by step, and bounded: the lowest goes first.
    std::sort(opened_.begin(), opened_.end());
    if (opened_.size() > 4 * kWindow) opened_.pop_front();
  } else {
    opened->second = std::min(opened->second, when);
  }
  if (pushed_step == a.last_step + 1 && a.last_step >= 0) {
    a.last_step_time = when - s.first;
  }
  a.last_step = pushed_step;
  s.step = pushed_step;
  s.first = s.last = when;
}

void ActivityLog::NoteReports(int rank, absl::Time when,
                              absl::Span<const StepReport> reports) {
  absl::MutexLock lock(&mu_);
  if (rank < 0 || rank >= static_cast<int>(activity_.size())) return;
  WorkerActivity& a = activity_[rank];
  a.last_contact = std::max(a.last_contact, when);
  Samples& s = samples_[rank];
  for (const StepReport& r : reports) {
    if (!Plausible(r)) continue;
    if (r.step < s.reported - 1) Reset(&s);
    if (r.step <= s.reported) continue;
    const absl::Duration took = absl::Microseconds(
        r.input_us + r.compute_us + r.push_us + r.wait_us);
    s.reported = r.step;
    Keep(&s.reports, r);
    Keep(&s.step_time, took);
    // What status and the step gauge show of the rank.
    a.last_step = r.step;
    a.last_step_time = took;
  }
  // For Get's staleness: the rank's latest word.
  if (s.reported >= 0) {
    s.step = s.reported;
    s.first = s.last = when;
  }
}

std::vector<WorkerActivity> ActivityLog::Get(absl::Time now) const {
  absl::MutexLock lock(&mu_);
  std::vector<WorkerActivity> out = activity_;
  for (size_t r = 0; r < out.size(); ++r) {
    const Samples& s = samples_[r];
    ActivityWindow& w = out[r].window;
    auto same = [](absl::Duration d) { return d; };
    w.late_steps = static_cast<int>(s.lateness.size());
    w.lateness = Median(s.lateness, same);
    w.timed_steps = static_cast<int>(s.step_time.size());
    w.step_time = Median(s.step_time, same);
    w.reports = static_cast<int>(s.reports.size());
    auto us = [](int64_t v) { return absl::Microseconds(v); };
    w.input = Median(s.reports, [&](const StepReport& x) { return us(x.input_us); });
    w.compute =
        Median(s.reports, [&](const StepReport& x) { return us(x.compute_us); });
    w.push = Median(s.reports, [&](const StepReport& x) { return us(x.push_us); });
    w.wait = Median(s.reports, [&](const StepReport& x) { return us(x.wait_us); });
    // A rank that stopped pushing (it left, or waits on a lost one) is
    // not judged on what it did before.
    if (now != absl::InfinitePast() && s.step >= 0 &&
        now - s.last > std::max(kStale, 4 * w.step_time)) {
      w.late_steps = w.timed_steps = w.reports = 0;
    }
  }
  return out;
}

}  // namespace lockstep
