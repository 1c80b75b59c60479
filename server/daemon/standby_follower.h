// A standby shard's side of replication (lockstep_server --standby_of,
// docs/faults.md "Standby failover"): it follows the primary's versions
// (ReplicationService's Follow, a long poll) and keeps the newest state,
// until the primary is lost -- no answer for `failover_timeout` -- and the
// standby takes over with that state, or the primary says the job is done.
//
// Used from one thread (the daemon's).
#ifndef LOCKSTEP_SERVER_DAEMON_STANDBY_FOLLOWER_H_
#define LOCKSTEP_SERVER_DAEMON_STANDBY_FOLLOWER_H_

#include <cstdint>
#include <functional>
#include <optional>
#include <string>

#include "absl/status/statusor.h"
#include "absl/synchronization/notification.h"
#include "absl/time/time.h"
#include "common/security/tls_options.h"
#include "server/core/checkpoint.h"
#include "server/daemon/daemon_log.h"

namespace lockstep {

struct StandbyOptions {
  std::string primary;  // host:port of the shard followed.
  std::string self;     // This server's address, for the primary's log.
  TlsOptions tls;       // The server's own: its certificate, CA and token.
  // The primary is lost after this long without an answer.
  absl::Duration failover_timeout = absl::Seconds(1);
  int shard = 0;
  int num_shards = 1;
  // Told, at the start and on each change, whether workers that call this
  // standby are sent on to the primary: while the primary answers, and
  // while this standby holds no state to take over with. Otherwise they
  // wait for it to take over (their calls to the primary failed).
  std::function<void(bool send_on)> send_workers_on;
};

struct StandbyEnd {
  enum Kind { kTakeOver, kJobDone, kStopped };
  Kind kind = kStopped;
  std::optional<ShardCheckpoint> state;  // kTakeOver: the newest held.
  absl::Time primary_lost;               // kTakeOver: its last answer.
};

// Follows until one of StandbyEnd's ends; `stop` (not owned) ends it
// early. FAILED_PRECONDITION when the primary refuses to be followed (no
// --replicas=2, another shard, not an admin) or sends a damaged state.
absl::StatusOr<StandbyEnd> FollowPrimary(const StandbyOptions& options,
                                         absl::Notification* stop,
                                         const DaemonLog& log);

}  // namespace lockstep

#endif  // LOCKSTEP_SERVER_DAEMON_STANDBY_FOLLOWER_H_
