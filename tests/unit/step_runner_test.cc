// StepRunner alone: a real 16-8-4 MLP on the CPU device (172 parameters)
// and LocalStepSession (SGD on the gradient it is handed), each step
// checked against a second MLP that computes the same batch by itself.
#include "worker/train/step_runner.h"

#include <memory>
#include <vector>

#include "absl/time/time.h"
#include "common/base/env.h"
#include "common/base/random.h"
#include "common/base/status_macros.h"
#include "gtest/gtest.h"
#include "tests/unit/local_step_session.h"
#include "worker/data/dataset.h"
#include "worker/data/sharded_sampler.h"
#include "worker/device/device_factory.h"
#include "worker/model/mlp.h"
#include "worker/train/trainer_options.h"

namespace lockstep {
namespace {

constexpr int kBatch = 8;
constexpr int64_t kParameters = 16 * 8 + 8 + 8 * 4 + 4;  // 172.

struct CpuMlp {
  static absl::StatusOr<CpuMlp> Create() {
    DeviceOptions options;
    options.kind = "cpu";
    CpuMlp made;
    ASSIGN_OR_RETURN(made.device, CreateDevice(options));
    ASSIGN_OR_RETURN(made.model,
                     CreateMlp({16, 8, 4}, kBatch, made.device.get()));
    return made;
  }
  std::unique_ptr<Device> device;
  std::unique_ptr<GraphModel> model;
};

class StepRunnerTest : public ::testing::Test {
 protected:
  void SetUp() override {
    absl::StatusOr<CpuMlp> mlp = CpuMlp::Create();
    absl::StatusOr<CpuMlp> reference = CpuMlp::Create();
    ASSERT_TRUE(mlp.ok() && reference.ok());
    mlp_ = *std::move(mlp);
    reference_ = *std::move(reference);
    options_.batch_size = kBatch;
    options_.env = &env_;
    for (int64_t i = 0; i < kParameters; ++i) {
      initial_.push_back(0.01f * static_cast<float>(i % 17) - 0.08f);
    }
  }
  StepRunner Runner() {
    return StepRunner(&options_, mlp_.model.get(), &session_, &train_);
  }
  ShardedSampler Sampler() {
    absl::StatusOr<ShardedSampler> sampler =
        ShardedSampler::Create(train_.num_examples, 1, 0, kBatch, 42);
    EXPECT_TRUE(sampler.ok()) << sampler.status();
    return *std::move(sampler);
  }

  FakeEnv env_;
  CpuMlp mlp_, reference_;
  const Dataset train_ = MakeSyntheticDataset(64, 16, 4, 1);
  TrainerOptions options_;
  LocalStepSession session_;  // Learning rate 0.1.
  std::vector<float> initial_;
};

TEST_F(StepRunnerTest, TheSignatureFollowsTheSyncMode) {
  options_.num_workers = 4;
  options_.num_shards = 2;
  options_.chunk_bytes = 4096;
  options_.backup_workers = 1;
  options_.staleness = 3;
  StepRunner runner = Runner();
  options_.sync = SyncMode::kAllReduce;
  ModelSignature s = runner.Signature(40);
  EXPECT_EQ(s.tensors, mlp_.model->Tensors());
  EXPECT_EQ(s.total_steps, 40);
  EXPECT_EQ(s.num_workers, 4);
  EXPECT_EQ(s.num_shards, 2);
  EXPECT_EQ(s.chunk_bytes, 4096);
  EXPECT_EQ(s.sync.mode, SyncMode::kSync) << "all-reduce steps are sync";
  EXPECT_EQ(s.sync.backup_workers, 1);
  EXPECT_EQ(s.sync.staleness, 0);
  options_.sync = SyncMode::kAsync;
  s = runner.Signature(40);
  EXPECT_EQ(s.sync.mode, SyncMode::kAsync);
  EXPECT_EQ(s.sync.backup_workers, 0);
  options_.sync = SyncMode::kSsp;
  s = runner.Signature(40);
  EXPECT_EQ(s.sync.mode, SyncMode::kSsp);
  EXPECT_EQ(s.sync.staleness, 3);
}

TEST_F(StepRunnerTest, JoiningStartsFromTheInitialWeightsGiven) {
  options_.initial_weights = initial_;
  StepRunner runner = Runner();
  ASSERT_TRUE(runner.UseModelWeightBuffer().ok());
  absl::StatusOr<StepOutcome> joined = runner.Join(16);
  ASSERT_TRUE(joined.ok()) << joined.status();
  EXPECT_EQ(joined->version, 0);
  EXPECT_EQ(joined->next_step, 0);
  EXPECT_EQ(
      std::vector<float>(runner.weights().begin(), runner.weights().end()),
      initial_);
  EXPECT_EQ(session_.joined_with.total_steps, 16);
}

TEST_F(StepRunnerTest, InitialWeightsOfTheWrongSizeAreRefused) {
  options_.initial_weights = {1, 2, 3};
  StepRunner runner = Runner();
  const absl::Status status = runner.UseModelWeightBuffer();
  EXPECT_EQ(status.code(), absl::StatusCode::kInvalidArgument);
  EXPECT_EQ(status.message(),
            "the initial weights hold 3 values, the model 172");
}

// Step 0: the gradient of the sampler's batch for step 0 at the initial
// weights, applied by the session as w - 0.1 g.
TEST_F(StepRunnerTest, AStepExchangesTheGradientOfItsBatch) {
  options_.initial_weights = initial_;
  StepRunner runner = Runner();
  ASSERT_TRUE(runner.UseModelWeightBuffer().ok());
  ASSERT_TRUE(runner.Join(16).ok());
  ShardedSampler sampler = Sampler();
  BatchStats stats;
  absl::StatusOr<StepOutcome> stepped = runner.Step(&sampler, &stats);
  ASSERT_TRUE(stepped.ok()) << stepped.status();
  EXPECT_TRUE(stepped->applied);
  EXPECT_EQ(stepped->version, 1);
  EXPECT_EQ(session_.steps, std::vector<int64_t>{0});

  std::vector<float> features(kBatch * 16);
  std::vector<int32_t> labels(kBatch);
  ShardedSampler same = Sampler();
  GatherBatch(train_, same.BatchIndices(0, 0), absl::MakeSpan(features),
              absl::MakeSpan(labels));
  ASSERT_TRUE(reference_.model->SetWeights(initial_).ok());
  std::vector<float> gradient(kParameters);
  absl::StatusOr<BatchStats> want = reference_.model->ComputeGradients(
      features, labels, absl::MakeSpan(gradient), nullptr);
  ASSERT_TRUE(want.ok()) << want.status();
  EXPECT_EQ(stats.examples, kBatch);
  EXPECT_EQ(stats.loss_sum, want->loss_sum);
  EXPECT_EQ(stats.correct, want->correct);
  std::vector<float> next = initial_;
  for (int64_t i = 0; i < kParameters; ++i) next[i] -= 0.1f * gradient[i];
  EXPECT_EQ(
      std::vector<float>(runner.weights().begin(), runner.weights().end()),
      next);
}

TEST_F(StepRunnerTest, StragglingSleepsItsFixedAndRandomDelayOnTheEnv) {
  options_.straggle_ms = 30;
  options_.straggle_random_ms = 20;
  options_.rank = 0;
  StepRunner runner = Runner();
  ASSERT_TRUE(runner.Join(16).ok());
  ShardedSampler sampler = Sampler();
  BatchStats stats;
  ASSERT_TRUE(runner.Step(&sampler, &stats).ok());
  ASSERT_TRUE(runner.Step(&sampler, &stats).ok());
  int64_t want_ms = 0;
  for (uint64_t step = 0; step < 2; ++step) {
    Random random(Random::Derive(Random::Derive(options_.seed, 0), step));
    want_ms += 30 + static_cast<int64_t>(random.UniformInt(21));
  }
  EXPECT_EQ(env_.slept(), absl::Milliseconds(want_ms));
}

TEST_F(StepRunnerTest, EvaluatesTheWeightsItHolds) {
  options_.initial_weights = initial_;
  StepRunner runner = Runner();
  ASSERT_TRUE(runner.Join(16).ok());
  const Dataset test = MakeSyntheticDataset(32, 16, 4, 2);
  absl::StatusOr<BatchStats> got = runner.Evaluate(test);
  ASSERT_TRUE(got.ok()) << got.status();
  ASSERT_TRUE(reference_.model->SetWeights(initial_).ok());
  absl::StatusOr<BatchStats> want =
      reference_.model->Evaluate(test.features, test.labels);
  ASSERT_TRUE(want.ok()) << want.status();
  EXPECT_EQ(got->examples, 32);
  EXPECT_EQ(got->loss_sum, want->loss_sum);
  EXPECT_EQ(got->correct, want->correct);
}

}  // namespace
}  // namespace lockstep
