// The server's line about stragglers: shard 0 checks the straggler verdict
// (common/ops/straggler_verdict.h) on what it sees of each rank, and says
// once when a rank has been slower than the others' median by the set
// fraction at two checks in a row, and once when it keeps up again. The
// launcher shows the line among the server's output.
//
// Called from the daemon's serving thread only (thread-compatible).
#ifndef LOCKSTEP_SERVER_DAEMON_STRAGGLER_WATCH_H_
#define LOCKSTEP_SERVER_DAEMON_STRAGGLER_WATCH_H_

#include <vector>

#include "absl/time/time.h"
#include "common/ops/straggler_verdict.h"
#include "server/core/parameter_server.h"
#include "server/daemon/daemon_log.h"

namespace lockstep {

// The verdict's input from one shard's status.
std::vector<RankTiming> RankTimings(const ServerStatus& status);

class StragglerWatch final {
 public:
  // fraction <= 0: never says anything.
  StragglerWatch(double fraction, const ParameterServer* core,
                 DaemonLog log = LogToStderr);

  // Checks at most every `kEvery`.
  void Check(absl::Time now);

  static constexpr absl::Duration kEvery = absl::Milliseconds(500);

 private:
  const double fraction_;
  const ParameterServer* const core_;  // Not owned.
  const DaemonLog log_;
  absl::Time last_check_ = absl::InfinitePast();
  // By rank: checks in a row it was (positive) or was not (negative) a
  // straggler, and whether it was last said to be one.
  std::vector<int> streak_;
  std::vector<bool> said_;
};

}  // namespace lockstep

#endif  // LOCKSTEP_SERVER_DAEMON_STRAGGLER_WATCH_H_
