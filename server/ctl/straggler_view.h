// The text of `lockstep_ctl stragglers`: each rank's recent steps as the
// job's shards saw them, and the straggler verdict on them
// (common/ops/straggler_verdict.h). A pure function of its inputs.
//
//   Stragglers (sync: lateness to the barrier over each rank's last 16
//   steps; a straggler is later than the others' median by 20% of a step):
//     rank 1 is 31.4 ms later to the barrier than the others' median (+91%
//     of a 34.4 ms step): compute, 29.9 ms more than theirs
//
//   RANK  LATE     STEP     INPUT   COMPUTE  PUSH    WAIT     STEPS  REPORTS
//   0     0.9 ms   34.4 ms  0.1 ms  4.0 ms   0.2 ms  30.0 ms     16       16
//   1     32.3 ms  34.4 ms  0.1 ms  33.9 ms  0.2 ms  0.4 ms      16       16
#ifndef LOCKSTEP_SERVER_CTL_STRAGGLER_VIEW_H_
#define LOCKSTEP_SERVER_CTL_STRAGGLER_VIEW_H_

#include <string>
#include <vector>

#include "common/ops/straggler_verdict.h"
#include "server/ctl/status_view.h"

namespace lockstep {

// Every rank merged over the shards that answered (MergeRankTiming).
std::vector<RankTiming> MergedRankTimings(
    const std::vector<ShardReading>& shards);

// `options.synchronous` is taken from the job's signature.
std::string RenderStragglers(const std::vector<ShardReading>& shards,
                             StragglerOptions options);

}  // namespace lockstep

#endif  // LOCKSTEP_SERVER_CTL_STRAGGLER_VIEW_H_
