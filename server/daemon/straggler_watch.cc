#include "server/daemon/straggler_watch.h"

#include <string>

#include "absl/strings/str_cat.h"

namespace lockstep {

std::vector<RankTiming> RankTimings(const ServerStatus& status) {
  std::vector<RankTiming> out;
  for (const WorkerActivity& a : status.workers) {
    RankTiming t;
    t.rank = a.rank;
    t.late_steps = a.window.late_steps;
    t.lateness = a.window.lateness;
    t.timed_steps = a.window.timed_steps;
    t.step_time = a.window.step_time;
    t.reports = a.window.reports;
    t.input = a.window.input;
    t.compute = a.window.compute;
    t.push = a.window.push;
    t.wait = a.window.wait;
    out.push_back(t);
  }
  return out;
}

StragglerWatch::StragglerWatch(double fraction, const ParameterServer* core,
                               DaemonLog log)
    : fraction_(fraction), core_(core), log_(std::move(log)) {}

void StragglerWatch::Check(absl::Time now) {
  if (fraction_ <= 0 || now - last_check_ < kEvery) return;
  last_check_ = now;
  const ServerStatus status = core_->GetStatus();
  StragglerOptions options;
  options.fraction = fraction_;
  // An all-reduce job registers no signature: its ranks' own reports
  // (Coordinator.ReportSteps) are all there is, and no lateness.
  options.synchronous = status.signature.has_value() &&
                        status.signature->sync.mode == SyncMode::kSync;
  const std::vector<RankTiming> ranks = RankTimings(status);
  const std::vector<Straggler> found = FindStragglers(ranks, options);
  streak_.resize(ranks.size(), 0);
  said_.resize(ranks.size(), false);
  std::vector<const Straggler*> by_rank(ranks.size(), nullptr);
  for (const Straggler& s : found) {
    if (s.rank >= 0 && s.rank < static_cast<int>(ranks.size())) {
      by_rank[s.rank] = &s;
    }
  }
  const Judging judging = HowToJudge(ranks, options);
  if (judging.ranks < 2) return;  // No verdict: nothing changes.
  for (size_t r = 0; r < ranks.size(); ++r) {
    const RankTiming& t = ranks[r];
    // A rank with too few recent steps (it left, or just came) is neither
    // slow nor keeping up.
    if ((judging.by_lateness ? t.late_steps : t.timed_steps) <
        options.min_steps) {
      continue;
    }
    int& streak = streak_[r];
    if (by_rank[r] != nullptr) {
      streak = streak > 0 ? streak + 1 : 1;
      if (streak == 2 && !said_[r]) {
        said_[r] = true;
        log_(absl::StrCat("straggler: ", DescribeStraggler(*by_rank[r]),
                          " (over its last ", ActivityLog::kWindow,
                          " steps; lockstep_ctl stragglers for all ranks)"));
      }
    } else {
      streak = streak < 0 ? streak - 1 : -1;
      if (streak == -2 && said_[r]) {
        said_[r] = false;
        log_(absl::StrCat("straggler: rank ", r,
                          " keeps up with the others again"));
      }
    }
  }
}

}  // namespace lockstep
