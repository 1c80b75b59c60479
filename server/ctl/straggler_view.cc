#include "server/ctl/straggler_view.h"

#include <algorithm>

#include "absl/strings/str_cat.h"
#include "absl/strings/str_format.h"

namespace lockstep {
namespace {

std::string Cell(absl::Duration d, int samples) {
  return samples > 0 ? FormatShortDuration(d) : "-";
}

}  // namespace

std::vector<RankTiming> MergedRankTimings(
    const std::vector<ShardReading>& shards) {
  std::vector<RankTiming> ranks;
  for (const ShardReading& r : shards) {
    if (!r.status.ok()) continue;
    for (const ShardStatus::Worker& w : r.status->workers) {
      if (w.rank < 0) continue;
      if (w.rank >= static_cast<int>(ranks.size())) {
        const int from = static_cast<int>(ranks.size());
        ranks.resize(w.rank + 1);
        for (int k = from; k <= w.rank; ++k) ranks[k].rank = k;
      }
      MergeRankTiming(w.timing, &ranks[w.rank]);
    }
  }
  return ranks;
}

std::string RenderStragglers(const std::vector<ShardReading>& shards,
                             StragglerOptions options) {
  const ShardStatus* any = nullptr;
  for (const ShardReading& r : shards) {
    if (r.status.ok()) {
      any = &*r.status;
      break;
    }
  }
  if (any == nullptr) return "No shard answered.\n";
  options.synchronous = any->synchronous;
  const std::vector<RankTiming> ranks = MergedRankTimings(shards);
  const std::vector<Straggler> found = FindStragglers(ranks, options);
  const Judging judging = HowToJudge(ranks, options);
  std::string out = absl::StrFormat(
      "Stragglers (%s over each rank's recent steps; a straggler is %s the "
      "others' median by more than %.0f%% of a step):\n",
      judging.by_lateness ? "sync: lateness to the barrier" : "step time",
      judging.by_lateness ? "later than" : "slower than",
      100 * options.fraction);
  if (judging.ranks < 2) {
    absl::StrAppend(&out, "  not yet: ", options.min_steps,
                    " steps of at least two ranks are needed\n");
  } else if (found.empty()) {
    absl::StrAppend(&out, "  none\n");
  }
  for (const Straggler& s : found) {
    absl::StrAppend(&out, "  ", DescribeStraggler(s), "\n");
  }
  std::vector<std::vector<std::string>> rows = {
      {"RANK", "LATE", "STEP", "INPUT", "COMPUTE", "PUSH", "WAIT", "STEPS",
       "REPORTS"}};
  for (const RankTiming& r : ranks) {
    // Lateness compares the ranks' same steps: sync mode only.
    rows.push_back({absl::StrCat(r.rank),
                    Cell(r.lateness, options.synchronous ? r.late_steps : 0),
                    Cell(r.step_time, r.timed_steps), Cell(r.input, r.reports),
                    Cell(r.compute, r.reports), Cell(r.push, r.reports),
                    Cell(r.wait, r.reports),
                    absl::StrCat(std::max(r.late_steps, r.timed_steps)),
                    absl::StrCat(r.reports)});
  }
  absl::StrAppend(&out, "\n", RenderTable(rows));
  return out;
}

}  // namespace lockstep
