// The operations view of one lockstep_server: Prometheus metrics on
// --metrics_port and a Chrome trace in --trace.
//
// ServerTelemetry owns the metrics registry, its HTTP endpoint and the trace
// recorder. As the core's BarrierObserver it times steps, barrier waits per
// rank, accumulate and apply phases; at every scrape it copies the core's
// counters (bytes, pushes accepted/refused/dropped, version) into the
// registry. Metric names are listed in docs/operations.md ("Metrics").
//
// Thread-safe.
#ifndef LOCKSTEP_SERVER_DAEMON_SERVER_TELEMETRY_H_
#define LOCKSTEP_SERVER_DAEMON_SERVER_TELEMETRY_H_

#include <atomic>
#include <cstdint>
#include <memory>
#include <string>
#include <vector>

#include "absl/base/thread_annotations.h"
#include "absl/status/statusor.h"
#include "absl/synchronization/mutex.h"
#include "absl/time/time.h"
#include "common/ops/health_server.h"
#include "common/ops/metrics.h"
#include "common/ops/metrics_http.h"
#include "common/ops/trace_recorder.h"
#include "server/core/barrier_observer.h"
#include "server/core/parameter_server.h"

namespace lockstep {

struct ServerTelemetryOptions {
  int shard = 0;
  int metrics_port = 0;     // 0: no metrics endpoint.
  // grpc.health.v1 alone, plaintext, on every interface, following the
  // main port's status: for probes that cannot speak TLS (the kubelet's).
  // 0: none.
  int health_port = 0;
  std::string trace_path;   // Empty: no trace.
  bool checkpoints = false;  // Export the checkpoint age.
};

class ServerTelemetry final : public BarrierObserver {
 public:
  // UNAVAILABLE when the port cannot be bound or the trace file made.
  static absl::StatusOr<std::unique_ptr<ServerTelemetry>> Create(
      const ServerTelemetryOptions& options);
  ~ServerTelemetry() override;

  // What the core should report to: null when neither metrics nor a trace
  // are on, so that the barriers skip the bookkeeping.
  BarrierObserver* observer() { return enabled_ ? this : nullptr; }

  // Scrapes read `core`'s status from now on. Not owned; must outlive this.
  void AttachCore(const ParameterServer* core, int num_workers);
  // The lockstep_serving gauge and the --health_port server's status.
  void SetServing(bool serving);
  void CheckpointSaved(int64_t version, absl::Time when);

  // Writes the trace's buffer out (also done periodically and at the end).
  absl::Status FlushTrace();

  int health_port() const { return health_ == nullptr ? 0 : health_->port(); }
  int metrics_port() const {
    return http_ == nullptr ? 0 : http_->port();
  }
  const MetricsRegistry& registry() const { return registry_; }

  void OnAccumulate(int chunk, int64_t step, int rank, absl::Time start,
                    absl::Time end) override;
  void OnApply(const Applied& applied) override;

 private:
  explicit ServerTelemetry(const ServerTelemetryOptions& options);
  // Copies the core's status into the registry (a scrape's collector).
  void Collect();
  // Collect's parts: the checkpoint's age and version, the core's counters,
  // and the workers by state and by rank.
  void CollectCheckpoint(absl::Time now);
  void CollectCounters(const ServerCounters& counters);
  void CollectWorkers(const ServerStatus& status);
  Histogram* BarrierWait(int rank);

  const ServerTelemetryOptions options_;
  const absl::Time start_;
  bool enabled_ = false;
  MetricsRegistry registry_;
  std::unique_ptr<MetricsHttpServer> http_;
  std::unique_ptr<HealthServer> health_;
  std::unique_ptr<TraceRecorder> trace_;

  Histogram* step_seconds_ = nullptr;
  Histogram* apply_seconds_ = nullptr;
  Gauge* serving_ = nullptr;

  absl::Mutex mu_;
  const ParameterServer* core_ ABSL_GUARDED_BY(mu_) = nullptr;  // Not owned.
  std::vector<Histogram*> barrier_wait_ ABSL_GUARDED_BY(mu_);  // By rank.

  std::atomic<int64_t> checkpoint_version_{-1};
  std::atomic<int64_t> checkpoint_unix_micros_{0};  // 0: none yet.
};

}  // namespace lockstep

#endif  // LOCKSTEP_SERVER_DAEMON_SERVER_TELEMETRY_H_
