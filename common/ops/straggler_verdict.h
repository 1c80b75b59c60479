// Which worker ranks hold a job back, and in which phase of their step
// (docs/operations.md, "Stragglers"). A parameter-server shard sees when
// each rank's gradient arrives; each worker reports how its own step went
// (common/rpc/step_report.h). Put together, a slow rank is told apart by
// where its time goes: its input, its compute, its pushing, or the network
// (late at the server although its own phases are not slow).
//
// Pure functions of their inputs, shared by the server's log line and
// `lockstep_ctl stragglers`.
#ifndef LOCKSTEP_COMMON_OPS_STRAGGLER_VERDICT_H_
#define LOCKSTEP_COMMON_OPS_STRAGGLER_VERDICT_H_

#include <string>
#include <vector>

#include "absl/time/time.h"
#include "absl/types/span.h"

namespace lockstep {

// One rank over a window of its recent steps, as shards saw it: medians.
struct RankTiming {
  int rank = 0;
  // Synchronous mode: from the step's first push by any rank to this
  // rank's last push of it (how long the barrier waited for it, plus its
  // own push's span). Other modes have none (the ranks' steps differ).
  int late_steps = 0;
  absl::Duration lateness;
  // Between the rank's first pushes of consecutive steps.
  int timed_steps = 0;
  absl::Duration step_time;
  // The worker's own reports (StepReport).
  int reports = 0;
  absl::Duration input;
  absl::Duration compute;
  absl::Duration push;
  absl::Duration wait;
};

// Folds another shard's view of the same rank into `into`: the latest last
// push (lateness) and the longest step; the reports of the shard that has
// more of them (every shard receives the same ones).
void MergeRankTiming(const RankTiming& other, RankTiming* into);

struct StragglerOptions {
  // Sync mode: ranks are compared by lateness; otherwise by step time.
  bool synchronous = true;
  // A rank is a straggler when it is slower than the median of the other
  // ranks by more than this fraction of the median step time.
  double fraction = 0.2;
  int min_steps = 5;  // Samples a rank needs before it is judged.
};

enum class SlowPhase { kInput, kCompute, kPush, kNetwork, kUnknown };
const char* SlowPhaseName(SlowPhase phase);

struct Straggler {
  int rank = 0;
  // What was compared: lateness (synchronous) or step time (the others);
  // or, not synchronous, the work a step (step time less the wait for the
  // servers' answer) where that sets the rank further apart: in SSP the
  // others are held back to its pace and their step times equal its own.
  bool by_lateness = false;
  bool by_work = false;
  absl::Duration slowness;
  absl::Duration others;     // The other ranks' median of it.
  absl::Duration step_time;  // Median over the ranks.
  double excess = 0;         // (slowness - others) / step_time.
  SlowPhase phase = SlowPhase::kUnknown;
  // The phase's excess over the other ranks' median of it; for kNetwork,
  // the lateness (or, without it, the wait) that the worker's own phases
  // do not explain.
  absl::Duration phase_excess;
};

// Whether ranks are compared by lateness (sync mode, at least two ranks
// with min_steps of it) rather than step time, and how many ranks have
// enough samples of what is compared to be judged.
struct Judging {
  bool by_lateness = false;
  int ranks = 0;
};
Judging HowToJudge(absl::Span<const RankTiming> ranks,
                   const StragglerOptions& options);

// The stragglers among `ranks`, slowest first; empty with fewer than two
// judged ranks (HowToJudge).
std::vector<Straggler> FindStragglers(absl::Span<const RankTiming> ranks,
                                      const StragglerOptions& options);

// "rank 1 is 31.2 ms a step slower than the others' median (+52% of a
// 60.1 ms step): compute, 30.8 ms more than theirs"
std::string DescribeStraggler(const Straggler& s);

// "12.3 ms", "1.20 s", "850 us".
std::string FormatShortDuration(absl::Duration d);

}  // namespace lockstep

#endif  // LOCKSTEP_COMMON_OPS_STRAGGLER_VERDICT_H_
