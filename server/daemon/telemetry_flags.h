// lockstep_server's observability flags (--metrics_port, --health_port,
// --trace, --straggler_fraction), parsed into DaemonOptions; the flags are
// defined in telemetry_flags.cc, which --help lists with server_main.cc's.
#ifndef LOCKSTEP_SERVER_DAEMON_TELEMETRY_FLAGS_H_
#define LOCKSTEP_SERVER_DAEMON_TELEMETRY_FLAGS_H_

#include "absl/status/status.h"
#include "server/daemon/daemon.h"

namespace lockstep {

// INVALID_ARGUMENT for a port outside [0, 65535] or a fraction that is
// negative or not finite. Needs options->shard (the trace's {shard}).
absl::Status ParseTelemetry(DaemonOptions* options);

}  // namespace lockstep

#endif  // LOCKSTEP_SERVER_DAEMON_TELEMETRY_FLAGS_H_
