#include "common/ops/telemetry_endpoints.h"

#include <utility>

#include "absl/status/status.h"
#include "absl/strings/str_cat.h"

namespace lockstep {

absl::StatusOr<TelemetryEndpoints> StartTelemetryEndpoints(
    const TelemetryEndpointOptions& options, const MetricsRegistry* registry) {
  for (int port : {options.health_port, options.metrics_port}) {
    if (port < 0 || port > 65535) {
      return absl::InvalidArgumentError(
          absl::StrCat("port ", port, " is outside [0, 65535]"));
    }
  }
  TelemetryEndpoints e;
  if (options.health_port > 0) {
    absl::StatusOr<std::unique_ptr<HealthServer>> health =
        HealthServer::Start(options.health_port);
    if (!health.ok()) return health.status();
    e.health = *std::move(health);
  }
  if (options.metrics_port > 0) {
    MetricsHttpOptions http;
    http.port = options.metrics_port;
    absl::StatusOr<std::unique_ptr<MetricsHttpServer>> server =
        MetricsHttpServer::Start(http, registry);
    if (!server.ok()) return server.status();
    e.http = *std::move(server);
  }
  if (!options.trace.path.empty()) {
    absl::StatusOr<std::unique_ptr<TraceRecorder>> recorder =
        TraceRecorder::Create(options.trace);
    if (!recorder.ok()) return recorder.status();
    e.trace = *std::move(recorder);
  }
  return e;
}

}  // namespace lockstep
