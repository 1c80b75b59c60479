// The worker's loss and accuracy gauges, as the trainer's callback sets
// them, read from the registry's Prometheus text.
#include "worker/app/worker_telemetry.h"

#include <memory>

#include "gtest/gtest.h"
#include "tests/integration/prometheus_text.h"

namespace lockstep {
namespace {

PrometheusSamples Samples(const WorkerTelemetry& telemetry) {
  absl::StatusOr<PrometheusSamples> samples =
      ParsePrometheusText(telemetry.registry().Render());
  EXPECT_TRUE(samples.ok()) << samples.status();
  return samples.ok() ? *samples : PrometheusSamples();
}

TEST(WorkerTelemetryTest, GaugesFollowStepsAndEpochs) {
  absl::StatusOr<std::unique_ptr<WorkerTelemetry>> telemetry =
      WorkerTelemetry::Create(WorkerTelemetryOptions{});
  ASSERT_TRUE(telemetry.ok()) << telemetry.status();
  TrainingCallback* callback = (*telemetry)->callback();
  ASSERT_NE(callback, nullptr);
  PrometheusSamples s = Samples(**telemetry);
  ASSERT_EQ(s.count("lockstep_worker_loss"), 1u);
  EXPECT_EQ(s["lockstep_worker_loss"], 0);
  EXPECT_EQ(s["lockstep_worker_val_accuracy"], 0);

  StepLogs step;
  step.loss = 0.75;  // The running means, not the batch's figures.
  step.accuracy = 0.5;
  step.batch_loss = 9;
  step.batch_accuracy = 0.125;
  callback->OnStepEnd(step);
  s = Samples(**telemetry);
  EXPECT_EQ(s["lockstep_worker_loss"], 0.75);
  EXPECT_EQ(s["lockstep_worker_accuracy"], 0.5);

  EpochLogs epoch;
  epoch.loss = 0.625;
  epoch.accuracy = 0.5625;
  callback->OnEpochEnd(epoch);  // Not validated: val gauges stay.
  s = Samples(**telemetry);
  EXPECT_EQ(s["lockstep_worker_loss"], 0.625);
  EXPECT_EQ(s["lockstep_worker_accuracy"], 0.5625);
  EXPECT_EQ(s["lockstep_worker_val_loss"], 0);
  epoch.has_validation = true;
  epoch.val_loss = 1.25;
  epoch.val_accuracy = 0.375;
  callback->OnEpochEnd(epoch);
  s = Samples(**telemetry);
  EXPECT_EQ(s["lockstep_worker_val_loss"], 1.25);
  EXPECT_EQ(s["lockstep_worker_val_accuracy"], 0.375);
}

}  // namespace
}  // namespace lockstep
