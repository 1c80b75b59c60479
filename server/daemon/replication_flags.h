// lockstep_server's replication flags (--replicas, --standby_of and their
// timeouts), parsed into DaemonOptions; the flags are defined in
// replication_flags.cc, which --help lists with server_main.cc's.
#ifndef LOCKSTEP_SERVER_DAEMON_REPLICATION_FLAGS_H_
#define LOCKSTEP_SERVER_DAEMON_REPLICATION_FLAGS_H_

#include "absl/status/status.h"
#include "server/daemon/daemon.h"

namespace lockstep {

// INVALID_ARGUMENT for a count other than 1 or 2, a malformed address,
// timeouts that are not positive, or a standby without a worker count.
absl::Status ParseReplication(DaemonOptions* options);

}  // namespace lockstep

#endif  // LOCKSTEP_SERVER_DAEMON_REPLICATION_FLAGS_H_
