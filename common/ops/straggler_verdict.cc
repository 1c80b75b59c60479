#include "common/ops/straggler_verdict.h"

#include <algorithm>
#include <cmath>

#include "absl/strings/str_format.h"

namespace lockstep {
namespace {

absl::Duration MedianOf(std::vector<absl::Duration> values) {
  if (values.empty()) return absl::ZeroDuration();
  std::sort(values.begin(), values.end());
  const size_t n = values.size();
  return n % 2 == 1 ? values[n / 2] : (values[n / 2 - 1] + values[n / 2]) / 2;
}

// The median of `field` over the ranks in `judged` other than `self`.
template <typename Field>
absl::Duration OthersMedian(absl::Span<const RankTiming* const> judged,
                            const RankTiming* self, Field field) {
  std::vector<absl::Duration> values;
  for (const RankTiming* r : judged) {
    if (r != self) values.push_back(field(*r));
  }
  return MedianOf(std::move(values));
}

}  // namespace

void MergeRankTiming(const RankTiming& other, RankTiming* into) {
  if (other.late_steps > 0) {
    into->lateness = into->late_steps > 0
                         ? std::max(into->lateness, other.lateness)
                         : other.lateness;
    into->late_steps = std::max(into->late_steps, other.late_steps);
  }
  if (other.timed_steps > 0) {
    into->step_time = std::max(into->step_time, other.step_time);
    into->timed_steps = std::max(into->timed_steps, other.timed_steps);
  }
  if (other.reports > into->reports) {
    into->reports = other.reports;
    into->input = other.input;
    into->compute = other.compute;
    into->push = other.push;
    into->wait = other.wait;
  }
}

const char* SlowPhaseName(SlowPhase phase) {
  switch (phase) {
    case SlowPhase::kInput: return "input";
    case SlowPhase::kCompute: return "compute";
    case SlowPhase::kPush: return "push";
    case SlowPhase::kNetwork: return "network";
    case SlowPhase::kUnknown: break;
  }
  return "unknown";
}

Judging HowToJudge(absl::Span<const RankTiming> ranks,
                   const StragglerOptions& options) {
  int with_lateness = 0;
  for (const RankTiming& r : ranks) {
    if (r.late_steps >= options.min_steps) ++with_lateness;
  }
  Judging j;
  j.by_lateness = options.synchronous && with_lateness >= 2;
  for (const RankTiming& r : ranks) {
    if ((j.by_lateness ? r.late_steps : r.timed_steps) >= options.min_steps) {
      ++j.ranks;
    }
  }
  return j;
}

std::vector<Straggler> FindStragglers(absl::Span<const RankTiming> ranks,
                                      const StragglerOptions& options) {
  const bool by_lateness = HowToJudge(ranks, options).by_lateness;
  std::vector<const RankTiming*> judged;
  for (const RankTiming& r : ranks) {
    const int samples = by_lateness ? r.late_steps : r.timed_steps;
    if (samples >= options.min_steps) judged.push_back(&r);
  }
  std::vector<Straggler> found;
  if (judged.size() < 2) return found;
  // A backup worker's rank may skip every step and time none: only ranks
  // with step times make the median step.
  std::vector<absl::Duration> step_times;
  for (const RankTiming* r : judged) {
    if (r->timed_steps > 0) step_times.push_back(r->step_time);
  }
  const absl::Duration step_time = MedianOf(step_times);
  if (step_time <= absl::ZeroDuration()) return found;
  auto slowness = [by_lateness](const RankTiming& r) {
    return by_lateness ? r.lateness : r.step_time;
  };
  // A step's own work: all but the wait for the servers' answer.
  auto work = [](const RankTiming& r) { return r.step_time - r.wait; };
  std::vector<const RankTiming*> reporting;
  for (const RankTiming* o : judged) {
    if (o->reports >= options.min_steps) reporting.push_back(o);
  }
  for (const RankTiming* r : judged) {
    Straggler s;
    s.rank = r->rank;
    s.by_lateness = by_lateness;
    s.slowness = slowness(*r);
    s.others = OthersMedian(judged, r, slowness);
    s.step_time = step_time;
    s.excess = absl::FDivDuration(s.slowness - s.others, step_time);
    // Not synchronous: SSP's bound holds the others to the slowest rank's
    // pace, so their step times equal its own and only the work a step
    // tells it apart (the others wait longer). Where the work says more,
    // the rank is slower a step of its own work.
    if (!by_lateness && r->reports >= options.min_steps &&
        reporting.size() >= 2) {
      const absl::Duration others_work = OthersMedian(reporting, r, work);
      const double by_work =
          absl::FDivDuration(work(*r) - others_work, step_time);
      if (by_work > s.excess) {
        s.by_work = true;
        s.slowness = work(*r);
        s.others = others_work;
        s.excess = by_work;
      }
    }
    if (s.excess <= options.fraction) continue;
    // Where the excess goes: the worker's own phases against the others'
    // (those that report), and what they leave unexplained.
    if (r->reports >= options.min_steps && reporting.size() >= 2) {
      const absl::Duration input =
          r->input - OthersMedian(reporting, r,
                                  [](const RankTiming& t) { return t.input; });
      const absl::Duration compute =
          r->compute -
          OthersMedian(reporting, r,
                       [](const RankTiming& t) { return t.compute; });
      const absl::Duration push =
          r->push - OthersMedian(reporting, r,
                                 [](const RankTiming& t) { return t.push; });
      const absl::Duration wait =
          r->wait - OthersMedian(reporting, r,
                                 [](const RankTiming& t) { return t.wait; });
      // Synchronous: lateness its own phases do not account for. Other
      // modes: a longer wait for its own push's answer.
      const absl::Duration network =
          by_lateness ? (s.slowness - s.others) - std::max(input, absl::ZeroDuration()) -
                            std::max(compute, absl::ZeroDuration()) -
                            std::max(push, absl::ZeroDuration())
                      : wait;
      const std::pair<SlowPhase, absl::Duration> phases[] = {
          {SlowPhase::kInput, input},
          {SlowPhase::kCompute, compute},
          {SlowPhase::kPush, push},
          {SlowPhase::kNetwork, network}};
      s.phase = SlowPhase::kUnknown;
      s.phase_excess = absl::ZeroDuration();
      for (const auto& [phase, excess] : phases) {
        if (excess > s.phase_excess) {
          s.phase = phase;
          s.phase_excess = excess;
        }
      }
    }
    found.push_back(s);
  }
  std::sort(found.begin(), found.end(),
            [](const Straggler& a, const Straggler& b) {
              return a.excess > b.excess;
            });
  return found;
}

std::string FormatShortDuration(absl::Duration d) {
  const double s = absl::ToDoubleSeconds(d);
  if (std::fabs(s) >= 1) return absl::StrFormat("%.2f s", s);
  if (std::fabs(s) >= 1e-3) return absl::StrFormat("%.1f ms", s * 1e3);
  return absl::StrFormat("%.0f us", s * 1e6);
}

std::string DescribeStraggler(const Straggler& s) {
  std::string line = absl::StrFormat(
      "rank %d is %s %s than the others' median (+%.0f%% of a %s step): ",
      s.rank, FormatShortDuration(s.slowness - s.others),
      s.by_lateness ? "later to the barrier"
      : s.by_work   ? "slower a step of its own work (its step less its wait)"
                    : "slower a step",
      100 * s.excess, FormatShortDuration(s.step_time));
  if (s.phase == SlowPhase::kUnknown) {
    return line + "its worker reports no phases that explain it";
  }
  if (s.phase == SlowPhase::kNetwork) {
    return line + absl::StrFormat(
                      "network, %s %s its own phases do not explain",
                      FormatShortDuration(s.phase_excess),
                      s.by_lateness ? "of lateness" : "of waiting");
  }
  return line + absl::StrFormat("%s, %s more than theirs",
                                SlowPhaseName(s.phase),
                                FormatShortDuration(s.phase_excess));
}

}  // namespace lockstep
