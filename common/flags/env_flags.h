// Infrastructure flags from the environment. Every binary reads each flag
// of EnvironmentFlags() that it defines also from LOCKSTEP_<NAME> (the name
// in upper case: --tls_cert from LOCKSTEP_TLS_CERT), so that a deployment
// (a Kubernetes runtime, a systemd unit) sets where the certificates, the
// token, the ports and the checkpoints are once, and a job's command line
// carries only the training's own flags. The command line wins over the
// environment, and the environment over the default; an empty variable is
// unset. A variable whose flag this binary lacks is ignored (a pod's
// variables reach every container). The Python package reads the same
// names (worker/python/lockstep/cluster.py). docs/flags.md lists them.
#ifndef LOCKSTEP_COMMON_FLAGS_ENV_FLAGS_H_
#define LOCKSTEP_COMMON_FLAGS_ENV_FLAGS_H_

#include <string>
#include <vector>

#include "absl/status/statusor.h"
#include "absl/strings/string_view.h"
#include "absl/types/span.h"

namespace lockstep {

// The flags LOCKSTEP_<NAME> may set: TLS and authentication, the addresses
// and ports a process listens on, and the folders of checkpoints, data and
// outputs. Training flags are not among them: a job's command line says
// how it trains.
absl::Span<const absl::string_view> EnvironmentFlags();

// Those of EnvironmentFlags() that name one process's own port or address
// (--listen, --port_file, --metrics_port, --health_port, --allreduce_host):
// lockstep_launch gives each process its own and keeps these variables
// from its children.
absl::Span<const absl::string_view> PerProcessEnvironmentFlags();

// "LOCKSTEP_" + `flag` in upper case.
std::string EnvironmentVariableOf(absl::string_view flag);

// A flag set from the environment.
struct EnvironmentFlag {
  std::string variable;  // LOCKSTEP_TLS_CERT
  std::string flag;      // tls_cert
  std::string value;
};

// Sets every flag of EnvironmentFlags() that this program defines and whose
// variable is set and not empty, and returns them in the list's order.
// INVALID_ARGUMENT naming the variable ("LOCKSTEP_METRICS_PORT=x: ...") for
// a value the flag cannot take; flags set before it stay set. Call it
// before parsing the command line, which then overrides these.
absl::StatusOr<std::vector<EnvironmentFlag>> SetFlagsFromEnvironment();

}  // namespace lockstep

#endif  // LOCKSTEP_COMMON_FLAGS_ENV_FLAGS_H_
