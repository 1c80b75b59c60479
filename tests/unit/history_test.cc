// The summary's per-epoch history (Keras's History.history) and the
// callbacks' fan-out.
#include "worker/train/history.h"

#include "gtest/gtest.h"

namespace lockstep {
namespace {

EpochLogs Epoch(int epoch, double loss, double accuracy, double speed) {
  EpochLogs logs;
  logs.epoch = epoch;
  logs.loss = loss;
  logs.accuracy = accuracy;
  logs.examples_per_sec = speed;
  return logs;
}

TEST(HistoryTest, EmptyBeforeAnyEpoch) {
  EXPECT_EQ(History().ToJson(),
            "{\"epoch\": [], \"loss\": [], \"accuracy\": [], "
            "\"examples_per_sec\": []}");
}

TEST(HistoryTest, OneListPerFigure) {
  History history;
  history.OnStepEnd(StepLogs{});  // Steps are not history.
  history.OnEpochEnd(Epoch(1, 0.5, 0.75, 1000));
  history.OnEpochEnd(Epoch(2, 0.25, 0.875, 1250));
  ASSERT_EQ(history.epochs().size(), 2u);
  EXPECT_EQ(history.ToJson(),
            "{\"epoch\": [1, 2], \"loss\": [0.5, 0.25], "
            "\"accuracy\": [0.75, 0.875], \"examples_per_sec\": [1000, 1250]}");
}

TEST(HistoryTest, ValidationListsWhenValidated) {
  History history;
  EpochLogs logs = Epoch(1, 0.5, 0.75, 1000);
  logs.has_validation = true;
  logs.val_loss = 0.625;
  logs.val_accuracy = 0.5;
  history.OnEpochEnd(logs);
  EXPECT_EQ(history.ToJson(),
            "{\"epoch\": [1], \"loss\": [0.5], \"accuracy\": [0.75], "
            "\"examples_per_sec\": [1000], \"val_loss\": [0.625], "
            "\"val_accuracy\": [0.5]}");
}

TEST(HistoryTest, ValuesKeepDoublePrecision) {
  History history;
  history.OnEpochEnd(Epoch(1, 0.1, 1.0 / 3, 0));
  EXPECT_EQ(history.ToJson(),
            "{\"epoch\": [1], \"loss\": [0.10000000000000001], "
            "\"accuracy\": [0.33333333333333331], \"examples_per_sec\": [0]}");
}

class Counting final : public TrainingCallback {
 public:
  void OnStepEnd(const StepLogs& logs) override { steps += logs.step; }
  void OnEpochEnd(const EpochLogs& logs) override { epochs += logs.epoch; }
  int64_t steps = 0;
  int epochs = 0;
};

TEST(CallbackListTest, TellsEachCallback) {
  Counting a, b;
  CallbackList list;
  EXPECT_TRUE(list.empty());
  list.Add(&a);
  list.Add(&b);
  StepLogs step;
  step.step = 3;
  list.OnStepEnd(step);
  list.OnEpochEnd(Epoch(2, 0, 0, 0));
  EXPECT_EQ(a.steps, 3);
  EXPECT_EQ(b.steps, 3);
  EXPECT_EQ(a.epochs, 2);
  EXPECT_EQ(b.epochs, 2);
}

TEST(LearningRateTest, TheOptimizersRateAtEveryStep) {
  OptimizerConfig adam = OptimizerConfig::Defaults("adam");
  adam.learning_rate = 0.0025;
  EXPECT_EQ(LearningRateAt(adam, 0), 0.0025);
  EXPECT_EQ(LearningRateAt(adam, 1000), 0.0025);
}

}  // namespace
}  // namespace lockstep
