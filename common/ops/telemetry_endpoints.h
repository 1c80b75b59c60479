// TelemetryEndpoints: what a Lockstep process opens for operations, made in
// one place for the server and the worker (docs/operations.md): a
// health-only gRPC server (NOT_SERVING until told otherwise), the HTTP
// endpoint of a metrics registry, and a Chrome trace recorder. Each is null
// when its port or path is not given.
//
// The owner keeps the pieces and stops `http` before the registry it reads
// goes away. Plain data: thread-safety is each piece's own.
#ifndef LOCKSTEP_COMMON_OPS_TELEMETRY_ENDPOINTS_H_
#define LOCKSTEP_COMMON_OPS_TELEMETRY_ENDPOINTS_H_

#include <memory>
#include <string>

#include "absl/status/statusor.h"
#include "common/ops/health_server.h"
#include "common/ops/metrics.h"
#include "common/ops/metrics_http.h"
#include "common/ops/trace_recorder.h"

namespace lockstep {

struct TelemetryEndpointOptions {
  int health_port = 0;   // 0: no health server.
  int metrics_port = 0;  // 0: no metrics endpoint.
  // Empty path: no trace. process_name and sort_index as the trace shows
  // the process.
  TraceRecorderOptions trace;
};

struct TelemetryEndpoints {
  std::unique_ptr<HealthServer> health;
  std::unique_ptr<MetricsHttpServer> http;  // Serves `registry`.
  std::unique_ptr<TraceRecorder> trace;
};

// Starts what `options` asks for; `registry` (not owned) must outlive the
// HTTP endpoint. INVALID_ARGUMENT for a port outside [0, 65535];
// UNAVAILABLE when a port cannot be bound or the trace file made (what was
// started is stopped again).
absl::StatusOr<TelemetryEndpoints> StartTelemetryEndpoints(
    const TelemetryEndpointOptions& options, const MetricsRegistry* registry);

}  // namespace lockstep

#endif  // LOCKSTEP_COMMON_OPS_TELEMETRY_ENDPOINTS_H_
