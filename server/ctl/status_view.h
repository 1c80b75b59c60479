// The text of `lockstep_ctl status`: one job's progress from what each of
// its server shards answered. Pure functions of their inputs (no I/O), so
// tests check the text exactly.
//
//   Lockstep job: version 120 (step 120), 2 workers, 1 shard
//   Model: 101770 parameters in 4 tensors, adam, sync, total 2340 steps
//   Step 120: pushed by 1 of 2 (0); awaiting 1
//
//   RANK  STATE     STEP 120  LAST CONTACT  STEP TIME  LAST STEP
//   0     training  pushed    0.0s ago        11.9 ms        120
//   1     training  awaited   0.2s ago        12.4 ms        119
//
//   SHARD  ADDRESS         HEALTH   VERSION  PUSHES  REFUSED  DROPPED  IN        OUT
//   0      127.0.0.1:2222  SERVING      120     240        0        0  95.2 MiB  95.2 MiB
#ifndef LOCKSTEP_SERVER_CTL_STATUS_VIEW_H_
#define LOCKSTEP_SERVER_CTL_STATUS_VIEW_H_

#include <string>
#include <vector>

#include "absl/status/statusor.h"
#include "absl/time/time.h"
#include "common/ops/health_client.h"
#include "server/ctl/shard_client.h"

namespace lockstep {

// One shard's answers (or why there are none).
struct ShardReading {
  std::string address;
  absl::StatusOr<ShardStatus> status;
  absl::StatusOr<HealthStatus> health;
};

// The view of the job; shards in the order given (shard order).
std::string RenderJobStatus(const std::vector<ShardReading>& shards);

// True when some shard answered and every answering shard says every worker
// has left.
bool JobFinished(const std::vector<ShardReading>& shards);

// "0.3s ago", "12s ago", "4m05s ago", "2h03m ago"; "never" for InfinitePast.
std::string FormatAge(absl::Time then, absl::Time now);
// Columns padded to their widest cell, two spaces apart, one line per row;
// no trailing spaces.
std::string RenderTable(const std::vector<std::vector<std::string>>& rows);
// "812 B", "95.2 MiB", "1.4 GiB".
std::string FormatBytes(int64_t bytes);

}  // namespace lockstep

#endif  // LOCKSTEP_SERVER_CTL_STATUS_VIEW_H_
