// The operations view of one lockstep_worker: grpc.health.v1 on
// --health_port, Prometheus metrics on --metrics_port and a Chrome trace in
// --trace.
//
// WorkerTelemetry owns a health-only gRPC server (NOT_SERVING until the
// worker trains, SERVING while it does), the metrics registry and its HTTP
// endpoint, and the trace recorder. As the trainer's StepObserver it times
// each step's pull, compute, push and wait phases; as its TrainingCallback
// it keeps the loss and accuracy gauges. Metric names are listed in
// docs/operations.md ("Metrics").
//
// Thread-safe.
#ifndef LOCKSTEP_WORKER_APP_WORKER_TELEMETRY_H_
#define LOCKSTEP_WORKER_APP_WORKER_TELEMETRY_H_

#include <cstdint>
#include <memory>
#include <string>

#include "absl/base/thread_annotations.h"
#include "absl/status/statusor.h"
#include "absl/synchronization/mutex.h"
#include "common/ops/health_server.h"
#include "common/ops/metrics.h"
#include "common/ops/metrics_http.h"
#include "common/ops/trace_recorder.h"
#include "worker/train/step_observer.h"
#include "worker/train/training_callback.h"

namespace lockstep {

struct WorkerTelemetryOptions {
  int rank = 0;
  int health_port = 0;   // 0: no health server.
  int metrics_port = 0;  // 0: no metrics endpoint.
  std::string trace_path;  // Empty: no trace.
  int64_t examples_per_step = 0;  // This worker's batch size.
};

class WorkerTelemetry final : public StepObserver, public TrainingCallback {
 public:
  // INVALID_ARGUMENT for a port outside [0, 65535]; UNAVAILABLE when a port
  // cannot be bound or the trace file made.
  static absl::StatusOr<std::unique_ptr<WorkerTelemetry>> Create(
      const WorkerTelemetryOptions& options);
  ~WorkerTelemetry() override;

  // What the trainer should report to: null when neither metrics nor a
  // trace are on.
  StepObserver* observer() { return enabled_ ? this : nullptr; }
  // Where the trainer reports its figures (the gauges).
  TrainingCallback* callback() { return this; }

  // SERVING (and lockstep_worker_training 1) while true.
  void SetTraining(bool training);

  absl::Status FlushTrace();

  int health_port() const { return health_ == nullptr ? 0 : health_->port(); }
  int metrics_port() const { return http_ == nullptr ? 0 : http_->port(); }
  const MetricsRegistry& registry() const { return registry_; }

  void OnPhase(Phase phase, int64_t step, absl::Time start,
               absl::Time end) override;
  void OnStep(int64_t step, int64_t version, absl::Time start,
              absl::Time end) override;
  void OnStepEnd(const StepLogs& logs) override;
  void OnEpochEnd(const EpochLogs& logs) override;

 private:
  explicit WorkerTelemetry(const WorkerTelemetryOptions& options);

  const WorkerTelemetryOptions options_;
  bool enabled_ = false;
  MetricsRegistry registry_;
  std::unique_ptr<HealthServer> health_;
  std::unique_ptr<MetricsHttpServer> http_;
  std::unique_ptr<TraceRecorder> trace_;

  Histogram* step_seconds_ = nullptr;
  Histogram* phase_seconds_[4] = {};  // By Phase.
  Counter* steps_ = nullptr;
  Counter* examples_ = nullptr;
  Gauge* version_ = nullptr;
  Gauge* training_ = nullptr;
  Gauge* loss_ = nullptr;  // And accuracy_: the epoch's running means.
  Gauge* accuracy_ = nullptr;
  Gauge* val_loss_ = nullptr;  // And val_accuracy_: the last epoch's.
  Gauge* val_accuracy_ = nullptr;

  absl::Mutex mu_;
  // The phases of the step being timed, summed (pushes run inside compute).
  int64_t step_ ABSL_GUARDED_BY(mu_) = -1;
  absl::Duration phase_time_[4] ABSL_GUARDED_BY(mu_);
};

}  // namespace lockstep

#endif  // LOCKSTEP_WORKER_APP_WORKER_TELEMETRY_H_
