// EpochReporter on a fake clock, with crafted step figures and a fake
// evaluation: every figure it reports is computed by hand.
#include "worker/train/epoch_reporter.h"

#include <cstdio>
#include <string>
#include <vector>

#include "absl/time/time.h"
#include "common/base/env.h"
#include "gmock/gmock.h"
#include "gtest/gtest.h"
#include "worker/train/training_callback.h"

namespace lockstep {
namespace {

using ::testing::ElementsAre;
using ::testing::IsEmpty;

class RecordingCallback final : public TrainingCallback {
 public:
  void OnStepEnd(const StepLogs& logs) override { steps.push_back(logs); }
  void OnEpochEnd(const EpochLogs& logs) override { epochs.push_back(logs); }
  std::vector<StepLogs> steps;
  std::vector<EpochLogs> epochs;
};

BatchStats Stats(double loss_sum, int64_t correct, int64_t examples) {
  BatchStats stats;
  stats.loss_sum = loss_sum;
  stats.correct = correct;
  stats.examples = examples;
  return stats;
}

// Epoch 2 of 3 (steps 8..15 of 24), 2 workers of batch 8, plain SGD at
// 0.05; the loop began 5 s before the epoch.
class EpochReporterTest : public ::testing::Test {
 protected:
  void SetUp() override {
    options_.batch_size = 8;
    options_.num_workers = 2;
    options_.progress = ProgressMode::kNone;
    options_.optimizer = OptimizerConfig::Defaults("sgd");
    options_.optimizer.learning_rate = 0.05;
    options_.env = &env_;
    options_.callback = &callback_;
    options_.on_step = [this](int64_t step, double seconds, double loss) {
      logged_.push_back({step, seconds, loss});
    };
    epoch_.index = 1;
    epoch_.count = 3;
    epoch_.begin = 8;
    epoch_.end = 16;
    epoch_.total_steps = 24;
    loop_start_ = env_.Now();
    env_.Advance(absl::Seconds(5));
  }
  EpochReporter Make() {
    return EpochReporter(
        &options_, epoch_, loop_start_, &test_,
        [this](const Dataset& data) -> absl::StatusOr<BatchStats> {
          evaluated_.push_back(&data);
          if (!evaluation_.ok()) return evaluation_;
          return &data == &test_ ? Stats(2.0, 8, 32) : Stats(3.0, 4, 16);
        },
        out_);
  }
  std::string Printed() {
    std::fflush(out_);
    std::rewind(out_);
    std::string text;
    for (int c; (c = std::fgetc(out_)) != EOF;)
      text.push_back(static_cast<char>(c));
    return text;
  }
  void TearDown() override { std::fclose(out_); }

  struct Logged {
    int64_t step;
    double seconds;
    double loss;
  };
  FakeEnv env_;
  TrainerOptions options_;
  EpochReporter::Epoch epoch_;
  absl::Time loop_start_;
  RecordingCallback callback_;
  std::vector<Logged> logged_;
  const Dataset test_ = MakeSyntheticDataset(32, 4, 2, 1);
  const Dataset validation_ = MakeSyntheticDataset(16, 4, 2, 2);
  std::vector<const Dataset*> evaluated_;
  absl::Status evaluation_;
  FILE* out_ = std::tmpfile();
};

TEST_F(EpochReporterTest, EachStepIsReportedWithItsAndTheRunningFigures) {
  EpochReporter reporter = Make();
  env_.Advance(absl::Seconds(2));
  reporter.StepApplied(8, Stats(4.0, 6, 8));
  env_.Advance(absl::Milliseconds(500));
  reporter.StepApplied(9, Stats(2.0, 2, 8));
  ASSERT_EQ(logged_.size(), 2u);
  EXPECT_EQ(logged_[0].step, 8);
  EXPECT_EQ(logged_[0].seconds, 7.0);
  EXPECT_EQ(logged_[0].loss, 0.5);
  EXPECT_EQ(logged_[1].step, 9);
  EXPECT_EQ(logged_[1].seconds, 7.5);
  EXPECT_EQ(logged_[1].loss, 0.25);
  ASSERT_EQ(callback_.steps.size(), 2u);
  const StepLogs& first = callback_.steps[0];
  EXPECT_EQ(first.step, 9);
  EXPECT_EQ(first.batch_loss, 0.5);
  EXPECT_EQ(first.batch_accuracy, 0.75);
  EXPECT_EQ(first.loss, 0.5);
  EXPECT_EQ(first.accuracy, 0.75);
  EXPECT_EQ(first.step_seconds, 2.0);
  EXPECT_EQ(first.examples_per_sec, 8.0);  // 8 x 2 workers in 2 s.
  EXPECT_EQ(first.learning_rate, 0.05);
  const StepLogs& second = callback_.steps[1];
  EXPECT_EQ(second.step, 10);
  EXPECT_EQ(second.batch_loss, 0.25);
  EXPECT_EQ(second.batch_accuracy, 0.25);
  EXPECT_EQ(second.loss, 0.375);  // 6 / 16.
  EXPECT_EQ(second.accuracy, 0.5);
  EXPECT_EQ(second.step_seconds, 0.5);
  EXPECT_EQ(second.examples_per_sec, 32.0);
  EXPECT_EQ(reporter.loss(), 0.375);
  EXPECT_EQ(reporter.accuracy(), 0.5);
  EXPECT_EQ(reporter.Elapsed(), absl::Milliseconds(2500));
}

TEST_F(EpochReporterTest, AStepWithoutExamplesOnlyMovesTheClock) {
  EpochReporter reporter = Make();
  env_.Advance(absl::Seconds(3));
  reporter.StepApplied(8, Stats(0, 0, 0));
  env_.Advance(absl::Seconds(1));
  reporter.StepApplied(9, Stats(4.0, 8, 8));
  ASSERT_EQ(callback_.steps.size(), 1u);
  EXPECT_EQ(callback_.steps[0].step_seconds, 1.0) << "from the empty step";
  EXPECT_EQ(logged_.size(), 1u);
}

TEST_F(EpochReporterTest, TheEpochsEndIsValidatedAndReported) {
  options_.validation = &validation_;
  EpochReporter reporter = Make();
  reporter.StepApplied(8, Stats(4.0, 6, 8));
  reporter.StepApplied(9, Stats(2.0, 2, 8));
  ASSERT_TRUE(reporter.End(absl::Seconds(4)).ok());
  ASSERT_EQ(callback_.epochs.size(), 1u);
  const EpochLogs& logs = callback_.epochs[0];
  EXPECT_EQ(logs.epoch, 2);
  EXPECT_EQ(logs.step, 16);
  EXPECT_EQ(logs.loss, 0.375);
  EXPECT_EQ(logs.accuracy, 0.5);
  EXPECT_EQ(logs.examples_per_sec, 8.0);  // 2 steps x 8 x 2 workers in 4 s.
  EXPECT_EQ(logs.learning_rate, 0.05);
  EXPECT_TRUE(logs.has_validation);
  EXPECT_EQ(logs.val_loss, 3.0 / 16);
  EXPECT_EQ(logs.val_accuracy, 0.25);
  EXPECT_THAT(evaluated_, ElementsAre(&validation_));
  EXPECT_EQ(Printed(), "") << "no --eval_every_epoch";
}

TEST_F(EpochReporterTest, RankZeroEvaluatesTheTestSetBeforeTheLastEpoch) {
  options_.eval_every_epoch = true;
  ASSERT_TRUE(Make().End(absl::Seconds(1)).ok());
  EXPECT_THAT(evaluated_, ElementsAre(&test_));
  EXPECT_EQ(Printed(), "Epoch 2/3 - test loss 0.0625 - test accuracy 0.2500\n");
}

TEST_F(EpochReporterTest, NoTestEvaluationAfterTheLastEpochOrOnOtherRanks) {
  options_.eval_every_epoch = true;
  options_.rank = 1;
  ASSERT_TRUE(Make().End(absl::Seconds(1)).ok());
  options_.rank = 0;
  epoch_.end = epoch_.total_steps;
  ASSERT_TRUE(Make().End(absl::Seconds(1)).ok());
  EXPECT_THAT(evaluated_, IsEmpty());
  EXPECT_EQ(Printed(), "");
  EXPECT_EQ(callback_.epochs.size(), 2u);
}

TEST_F(EpochReporterTest, AFailedValidationIsTheEpochsError) {
  options_.validation = &validation_;
  evaluation_ = absl::InternalError("device lost");
  EXPECT_EQ(Make().End(absl::Seconds(1)), evaluation_);
  EXPECT_THAT(callback_.epochs, IsEmpty());
}

}  // namespace
}  // namespace lockstep
