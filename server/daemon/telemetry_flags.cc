// lockstep_server's observability flags: metrics, the plaintext health
// port, the trace and the straggler line.
#include "server/daemon/telemetry_flags.h"

#include <cmath>
#include <string>

#include "absl/flags/flag.h"
#include "absl/strings/str_cat.h"
#include "absl/strings/str_replace.h"

ABSL_FLAG(int, metrics_port, 0,
          "Serve Prometheus metrics at http://HOST:PORT/metrics on every "
          "interface (0: off). See docs/operations.md.");
ABSL_FLAG(int, health_port, 0,
          "Also serve grpc.health.v1, and nothing else, in plaintext on "
          "every interface at this port (0: off), with the main port's "
          "status: for probes that cannot speak TLS, such as Kubernetes' "
          "gRPC probes of a server with --tls_cert.");
ABSL_FLAG(std::string, trace, "",
          "Write a Chrome trace-event JSON file of the accumulate and apply "
          "phases here (empty: off); open it in ui.perfetto.dev. {shard} in "
          "the path becomes the shard index.");
ABSL_FLAG(double, straggler_fraction, 0.2,
          "Shard 0 prints a line when a rank is slower than the other ranks' "
          "median by more than this fraction of a step (sync: later to the "
          "barrier; async: a longer step) over its recent steps, and "
          "names the phase that makes it slow: input, compute, push or "
          "network. 0: never. lockstep_ctl stragglers shows every rank.");

namespace lockstep {

absl::Status ParseTelemetry(DaemonOptions* options_out) {
  DaemonOptions& options = *options_out;
  options.telemetry.metrics_port = absl::GetFlag(FLAGS_metrics_port);
  options.telemetry.health_port = absl::GetFlag(FLAGS_health_port);
  options.telemetry.trace_path = absl::StrReplaceAll(
      absl::GetFlag(FLAGS_trace), {{"{shard}", absl::StrCat(options.shard)}});
  for (int port :
       {options.telemetry.metrics_port, options.telemetry.health_port}) {
    if (port < 0 || port > 65535) {
      return absl::InvalidArgumentError(
          "--metrics_port and --health_port must be in [0, 65535]");
    }
  }
  options.straggler_fraction = absl::GetFlag(FLAGS_straggler_fraction);
  if (!(options.straggler_fraction >= 0) ||
      !std::isfinite(options.straggler_fraction)) {
    return absl::InvalidArgumentError(
        "--straggler_fraction must be a finite number >= 0 (0: off)");
  }
  return absl::OkStatus();
}

}  // namespace lockstep
