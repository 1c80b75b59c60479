// What a standby shard holds of its primary (server/daemon/
// standby_follower.h): the newest state it was sent, and each chunk's state
// of the version before. The primary sends a state whenever a worker waits
// for a chunk's answer (server/daemon/replication_source.h), so in sync
// mode a state may hold chunks one version apart: the step's first chunks
// already applied, its last ones still gathering pushes. No worker has
// begun the next step then (it lacks the last chunks' answers), so the
// standby takes over at the lowest chunk's version, with each chunk's state
// of that version -- the newest, or the one before, which it was sent
// too: a chunk's answers wait until the standby holds that chunk's version,
// and the workers need those answers before the chunk can move on.
//
// Thread-compatible.
#ifndef LOCKSTEP_SERVER_DAEMON_STANDBY_STATE_H_
#define LOCKSTEP_SERVER_DAEMON_STANDBY_STATE_H_

#include <cstdint>
#include <map>
#include <optional>

#include "absl/status/statusor.h"
#include "server/core/checkpoint.h"

namespace lockstep {

class StandbyState {
 public:
  // A state the primary sent; its version is its lowest chunk's.
  void Update(ShardCheckpoint state);

  bool empty() const { return !newest_.has_value(); }
  // The version the standby would take over at; -1 when it holds none.
  int64_t version() const;

  // The state to go on from: in sync mode every chunk at version(); in the
  // asynchronous modes (whose checkpoints keep each chunk at its own
  // version) the newest as it came. FAILED_PRECONDITION when a chunk's
  // state of that version was never received, or when none was.
  absl::StatusOr<ShardCheckpoint> TakeOver() const;

 private:
  std::optional<ShardCheckpoint> newest_;
  std::map<int, ChunkState> previous_;  // By chunk: its version before.
};

}  // namespace lockstep

#endif  // LOCKSTEP_SERVER_DAEMON_STANDBY_STATE_H_
