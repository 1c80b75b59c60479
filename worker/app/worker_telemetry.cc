#include "worker/app/worker_telemetry.h"

#include <utility>

#include "absl/strings/str_cat.h"
#include "common/ops/telemetry_endpoints.h"

namespace lockstep {
namespace {

constexpr int kTrainingTrack = 1;
constexpr const char* kPhaseNames[] = {"pull", "compute", "push", "wait"};

int Index(StepObserver::Phase phase) { return static_cast<int>(phase); }

}  // namespace

absl::StatusOr<std::unique_ptr<WorkerTelemetry>> WorkerTelemetry::Create(
    const WorkerTelemetryOptions& options) {
  std::unique_ptr<WorkerTelemetry> t(new WorkerTelemetry(options));
  TelemetryEndpointOptions endpoints;
  endpoints.health_port = options.health_port;
  endpoints.metrics_port = options.metrics_port;
  endpoints.trace.path = options.trace_path;
  endpoints.trace.process_name =
      absl::StrCat("lockstep_worker rank ", options.rank);
  endpoints.trace.sort_index = 1000 + options.rank;  // After the servers.
  absl::StatusOr<TelemetryEndpoints> started =
      StartTelemetryEndpoints(endpoints, &t->registry_);
  if (!started.ok()) return started.status();
  t->health_ = std::move(started->health);
  t->http_ = std::move(started->http);
  t->trace_ = std::move(started->trace);
  if (t->trace_ != nullptr) t->trace_->NameThread(kTrainingTrack, "training");
  t->enabled_ = t->http_ != nullptr || t->trace_ != nullptr;
  return t;
}

WorkerTelemetry::WorkerTelemetry(const WorkerTelemetryOptions& options)
    : options_(options) {
  step_seconds_ = registry_.GetHistogram(
      "lockstep_worker_step_seconds",
      "Wall time of one training step: pull, compute, push and wait.",
      SecondsBuckets());
  for (int p = 0; p < 4; ++p) {
    phase_seconds_[p] = registry_.GetHistogram(
        "lockstep_worker_phase_seconds",
        "Time of one step's phase: pull (loading the received weights), "
        "compute (forward and backward, less the pushes inside it), push "
        "(encoding and sending gradients), wait (for the servers' replies).",
        SecondsBuckets(), {{"phase", kPhaseNames[p]}});
  }
  steps_ = registry_.GetCounter("lockstep_worker_steps_total",
                                "Training steps this worker completed.");
  examples_ = registry_.GetCounter(
      "lockstep_worker_examples_total",
      "Training examples this worker computed gradients on.");
  version_ = registry_.GetGauge(
      "lockstep_worker_version",
      "Version of the weights the latest step was answered with.");
  training_ = registry_.GetGauge(
      "lockstep_worker_training",
      "1 while the worker trains (grpc.health.v1 SERVING), else 0.");
  loss_ = registry_.GetGauge(
      "lockstep_worker_loss",
      "Mean training loss of this worker's batches so far in the epoch.");
  accuracy_ = registry_.GetGauge(
      "lockstep_worker_accuracy",
      "Training accuracy of this worker's batches so far in the epoch.");
  val_loss_ = registry_.GetGauge(
      "lockstep_worker_val_loss",
      "Validation loss after the last epoch (--validation_split).");
  val_accuracy_ = registry_.GetGauge(
      "lockstep_worker_val_accuracy",
      "Validation accuracy after the last epoch (--validation_split).");
}

WorkerTelemetry::~WorkerTelemetry() {
  http_.reset();  // Its thread reads the registry.
  health_.reset();
  trace_.reset();  // Writes what is buffered.
}

void WorkerTelemetry::SetTraining(bool training) {
  training_->Set(training ? 1 : 0);
  if (health_ != nullptr) health_->SetServing(training);
}

absl::Status WorkerTelemetry::FlushTrace() {
  return trace_ == nullptr ? absl::OkStatus() : trace_->Flush();
}

void WorkerTelemetry::OnPhase(Phase phase, int64_t step, absl::Time start,
                              absl::Time end) {
  if (trace_ != nullptr) {
    trace_->Complete(kPhaseNames[Index(phase)], "worker", kTrainingTrack,
                     start, end, {"step", step});
  }
  absl::MutexLock lock(&mu_);
  if (step != step_) {
    step_ = step;
    for (absl::Duration& d : phase_time_) d = absl::ZeroDuration();
  }
  phase_time_[Index(phase)] += end - start;
}

void WorkerTelemetry::OnStep(int64_t step, int64_t version, absl::Time start,
                             absl::Time end) {
  if (trace_ != nullptr) {
    trace_->Complete("step", "worker", kTrainingTrack, start, end,
                     {"step", step}, {"version", version});
  }
  step_seconds_->Observe(absl::ToDoubleSeconds(end - start));
  steps_->Increment();
  examples_->Increment(static_cast<double>(options_.examples_per_step));
  version_->Set(static_cast<double>(version));
  absl::MutexLock lock(&mu_);
  if (step != step_) return;  // No phase was timed.
  // Pushes run inside compute: compute's own time excludes them.
  phase_time_[Index(Phase::kCompute)] -= phase_time_[Index(Phase::kPush)];
  for (int p = 0; p < 4; ++p) {
    phase_seconds_[p]->Observe(
        absl::ToDoubleSeconds(std::max(absl::ZeroDuration(), phase_time_[p])));
  }
  step_ = -1;
}

void WorkerTelemetry::OnStepEnd(const StepLogs& logs) {
  loss_->Set(logs.loss);
  accuracy_->Set(logs.accuracy);
}

void WorkerTelemetry::OnEpochEnd(const EpochLogs& logs) {
  loss_->Set(logs.loss);
  accuracy_->Set(logs.accuracy);
  if (logs.has_validation) {
    val_loss_->Set(logs.val_loss);
    val_accuracy_->Set(logs.val_accuracy);
  }
}

}  // namespace lockstep
