// Trainer's loop in one process: a real MLP on the CPU device, synthetic
// data, and either LocalStepSession (tests/unit/local_step_session.h: a
// one-worker synchronous job that fails the steps a test asks it to and
// recovers with the real StepRecovery), or the real PsStepSession over
// ParameterServer shards in this process (workers on threads).
#include "worker/train/trainer.h"

#include <atomic>
#include <cmath>
#include <map>
#include <memory>
#include <thread>
#include <vector>

#include "absl/status/status.h"
#include "common/base/env.h"
#include "common/base/status_macros.h"
#include "gmock/gmock.h"
#include "gtest/gtest.h"
#include "tests/unit/in_process_job.h"
#include "tests/unit/local_step_session.h"
#include "worker/data/dataset.h"
#include "worker/device/device_factory.h"
#include "worker/exchange/ps_step_session.h"
#include "worker/exchange/step_session.h"
#include "worker/model/mlp.h"

namespace lockstep {
namespace {

using ::testing::ElementsAre;
using ::testing::ElementsAreArray;
using ::testing::HasSubstr;

constexpr int kBatch = 8;
constexpr int kExamples = 64;  // 8 steps an epoch.
constexpr float kLearningRate = 0.1f;

// A CPU device and an MLP of 16-8-4 (172 parameters) on it.
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

class TrainerTest : public ::testing::Test {
 protected:
  void SetUp() override {
    absl::StatusOr<CpuMlp> mlp = CpuMlp::Create();
    ASSERT_TRUE(mlp.ok()) << mlp.status();
    device_ = std::move(mlp->device);
    model_ = std::move(mlp->model);
    train_ = MakeSyntheticDataset(kExamples, 16, 4, 1);
    test_ = MakeSyntheticDataset(32, 16, 4, 2);
    options_.batch_size = kBatch;
    options_.epochs = 2;
    options_.progress = ProgressMode::kNone;
    options_.on_step = [this](int64_t step, double, double loss) {
      logged_.push_back(step);
      EXPECT_GT(loss, 0);
    };
  }

  absl::StatusOr<TrainSummary> Run(StepSession* session = nullptr) {
    Trainer trainer(options_, model_.get(),
                    session != nullptr ? session : &session_, &train_, &test_);
    return trainer.Run();
  }

  std::unique_ptr<Device> device_;
  std::unique_ptr<GraphModel> model_;
  Dataset train_, test_;
  TrainerOptions options_;
  LocalStepSession session_;
  std::vector<int64_t> logged_;
};

std::vector<int64_t> Range(int64_t from, int64_t to) {
  std::vector<int64_t> r;
  for (int64_t i = from; i < to; ++i) r.push_back(i);
  return r;
}

TEST_F(TrainerTest, TrainsEveryStepOfEveryEpochAndLeaves) {
  absl::StatusOr<TrainSummary> summary = Run();
  ASSERT_TRUE(summary.ok()) << summary.status();
  EXPECT_EQ(summary->steps, 16);
  EXPECT_EQ(summary->final_version, 16);
  EXPECT_EQ(summary->rejoins, 0);
  EXPECT_FALSE(summary->stopped);
  EXPECT_EQ(session_.steps, Range(0, 16));
  EXPECT_EQ(logged_, Range(0, 16));
  EXPECT_EQ(session_.joins, 1);
  EXPECT_EQ(session_.leaves, 1);
  // Rank 0 evaluated on the test set.
  EXPECT_GE(summary->test_accuracy, 0);
  EXPECT_LE(summary->test_accuracy, 1);
  EXPECT_GT(summary->test_loss, 0);
  // The signature is the job's: 2 epochs of 8 steps, one worker, sync.
  EXPECT_EQ(session_.joined_with.total_steps, 16);
  EXPECT_EQ(session_.joined_with.num_workers, 1);
  EXPECT_EQ(session_.joined_with.sync.mode, SyncMode::kSync);
  EXPECT_EQ(session_.joined_with.tensors.size(), 4u);
}

TEST_F(TrainerTest, MaxStepsEndsTheJobEarly) {
  options_.max_steps = 5;
  absl::StatusOr<TrainSummary> summary = Run();
  ASSERT_TRUE(summary.ok()) << summary.status();
  EXPECT_EQ(summary->steps, 5);
  EXPECT_EQ(session_.steps, Range(0, 5));
  EXPECT_EQ(session_.joined_with.total_steps, 5);
}

// A retryable failure: the trainer registers again and goes on from the
// version the job has, so step 3 is trained again and nothing is skipped.
TEST_F(TrainerTest, RejoinsAfterARetryableFailureAndRepeatsTheStep) {
  session_.failures[3] = absl::UnavailableError("server restarted");
  absl::StatusOr<TrainSummary> summary = Run();
  ASSERT_TRUE(summary.ok()) << summary.status();
  EXPECT_EQ(summary->rejoins, 1);
  EXPECT_EQ(session_.joins, 2);
  std::vector<int64_t> expected = Range(0, 4);
  for (int64_t s : Range(3, 16)) expected.push_back(s);
  EXPECT_EQ(session_.steps, expected);
  EXPECT_EQ(summary->steps, 16);  // Successful steps only.
  EXPECT_EQ(logged_, Range(0, 16));
}

TEST_F(TrainerTest, APermanentFailureEndsTheRun) {
  session_.failures[2] = absl::FailedPreconditionError("signature differs");
  absl::StatusOr<TrainSummary> summary = Run();
  EXPECT_EQ(summary.status().code(), absl::StatusCode::kFailedPrecondition);
  EXPECT_EQ(session_.steps, Range(0, 3));
  EXPECT_EQ(session_.joins, 1);
}

TEST_F(TrainerTest, AStopRequestLeavesWithoutTraining) {
  std::atomic<bool> stop{true};
  LocalStepSession session(&stop, &stop);
  absl::StatusOr<TrainSummary> summary = Run(&session);
  ASSERT_TRUE(summary.ok()) << summary.status();
  EXPECT_TRUE(summary->stopped);
  EXPECT_EQ(summary->steps, 0);
  EXPECT_TRUE(session.steps.empty());
  EXPECT_EQ(session.leaves, 1);
  EXPECT_EQ(summary->test_accuracy, -1);  // A stopped job is not evaluated.
}

// A stop signal during a failing step ends the run as a stop, not a rejoin
// (all-reduce's case: the ranks had not yet agreed on the stop).
TEST_F(TrainerTest, AFailureAfterAStopSignalIsAStop) {
  std::atomic<bool> signal{true};
  LocalStepSession session(&signal, /*stopping=*/nullptr);
  session.failures[1] = absl::UnavailableError("servers draining");
  absl::StatusOr<TrainSummary> summary = Run(&session);
  ASSERT_TRUE(summary.ok()) << summary.status();
  EXPECT_TRUE(summary->stopped);
  EXPECT_EQ(summary->rejoins, 0);
  EXPECT_EQ(session.steps, Range(0, 2));
  EXPECT_EQ(summary->steps, 1);
}

TEST_F(TrainerTest, AJobPastItsStepsIsRefused) {
  session_.join_version = 17;
  absl::StatusOr<TrainSummary> summary = Run();
  EXPECT_EQ(summary.status().code(), absl::StatusCode::kFailedPrecondition);
  EXPECT_THAT(std::string(summary.status().message()),
              HasSubstr("past this job's 16 steps"));
  EXPECT_TRUE(session_.steps.empty());
}

// A job joined at version 10 (a restarted worker) trains steps 10..15 only:
// the data position follows the version.
TEST_F(TrainerTest, AWorkerJoiningLateStartsAtTheJobsVersion) {
  session_.join_version = 10;
  absl::StatusOr<TrainSummary> summary = Run();
  ASSERT_TRUE(summary.ok()) << summary.status();
  EXPECT_EQ(session_.steps, Range(10, 16));
  EXPECT_EQ(summary->steps, 6);
  EXPECT_EQ(summary->final_version, 16);
}

// On a fake clock the loop's sleeps take no time and its times are exact:
// a 50 ms straggle before each of the 16 steps is all the time that passes.
TEST_F(TrainerTest, StragglingAndTheTimesItReportsRunOnTheEnvsClock) {
  FakeEnv env;
  options_.env = &env;
  options_.straggle_ms = 50;
  std::vector<double> seconds;
  options_.on_step = [&](int64_t, double s, double) { seconds.push_back(s); };
  absl::StatusOr<TrainSummary> summary = Run();
  ASSERT_TRUE(summary.ok()) << summary.status();
  EXPECT_EQ(env.slept(), absl::Milliseconds(16 * 50));
  ASSERT_EQ(seconds.size(), 16u);
  for (int s = 0; s < 16; ++s) {
    EXPECT_EQ(seconds[s],
              absl::ToDoubleSeconds(absl::Milliseconds(50 * (s + 1))))
        << "step " << s;
  }
  EXPECT_EQ(summary->wall_seconds,
            absl::ToDoubleSeconds(absl::Milliseconds(800)));
  // 16 steps of 8 examples in 0.8 s.
  EXPECT_DOUBLE_EQ(summary->examples_per_sec, 16 * 8 / 0.8);
}

// The weights shard `job` holds at its latest version, by the plan of a
// 172-parameter model in chunks of `chunk_bytes` over `num_shards`.
std::vector<float> ServerWeights(const InProcessJob& job, int num_shards,
                                 int64_t chunk_bytes) {
  absl::StatusOr<ChunkPlan> plan =
      ChunkPlan::Create(172, chunk_bytes, num_shards, 0);
  EXPECT_TRUE(plan.ok()) << plan.status();
  std::vector<float> weights(plan->num_elements());
  for (const Chunk& chunk : plan->chunks()) {
    job.server(chunk.shard)
        ->Pull(0, 0, chunk.index, 0, false,
               [&](absl::StatusOr<ChunkSnapshot> snapshot) {
                 ASSERT_TRUE(snapshot.ok()) << snapshot.status();
                 std::copy(snapshot->values->begin(), snapshot->values->end(),
                           weights.begin() + chunk.offset);
               });
  }
  return weights;
}

// Two workers on threads train through the real PsStepSession and two
// in-process shards: each takes the job's 8 steps (64 examples, 2 x 8 a
// step, 2 epochs) and both end with the very weights the shards hold.
TEST_F(TrainerTest, TwoWorkersTrainThroughInProcessShards) {
  constexpr int kWorkers = 2, kShards = 2;
  constexpr int64_t kChunkBytes = 64 * sizeof(float);  // 3 chunks.
  absl::StatusOr<InProcessJob> job = InProcessJob::Create(kWorkers, kShards);
  ASSERT_TRUE(job.ok()) << job.status();
  options_.num_workers = kWorkers;
  options_.num_shards = kShards;
  options_.chunk_bytes = kChunkBytes;
  options_.optimizer = OptimizerConfig::Defaults("sgd");
  options_.optimizer.learning_rate = kLearningRate;
  options_.on_step = nullptr;
  absl::StatusOr<TrainSummary> summaries[kWorkers];
  std::vector<float> weights[kWorkers];
  std::vector<std::thread> threads;
  for (int rank = 0; rank < kWorkers; ++rank) {
    threads.emplace_back([&, rank] {
      absl::StatusOr<CpuMlp> mlp = CpuMlp::Create();
      absl::StatusOr<std::unique_ptr<PsClient>> client =
          job->NewClient(PsClientOptions());
      if (!mlp.ok() || !client.ok()) {
        summaries[rank] = mlp.ok() ? client.status() : mlp.status();
        return;
      }
      StepSessionOptions session_options;
      session_options.rank = rank;
      session_options.num_workers = kWorkers;
      PsStepSession session(session_options, *std::move(client), nullptr);
      TrainerOptions options = options_;
      options.rank = rank;
      Trainer trainer(options, mlp->model.get(), &session, &train_, &test_);
      summaries[rank] = trainer.Run();
      weights[rank].assign(trainer.weights().begin(), trainer.weights().end());
    });
  }
  for (std::thread& t : threads) t.join();
  for (int rank = 0; rank < kWorkers; ++rank) {
    ASSERT_TRUE(summaries[rank].ok()) << summaries[rank].status();
    EXPECT_EQ(summaries[rank]->steps, 8) << "rank " << rank;
    EXPECT_EQ(summaries[rank]->final_version, 8) << "rank " << rank;
    EXPECT_EQ(summaries[rank]->rejoins, 0) << "rank " << rank;
  }
  EXPECT_GT(summaries[0]->test_loss, 0);       // Rank 0 evaluated,
  EXPECT_EQ(summaries[1]->test_accuracy, -1);  // rank 1 did not.
  const std::vector<float> held = ServerWeights(*job, kShards, kChunkBytes);
  EXPECT_THAT(weights[0], ElementsAreArray(held));
  EXPECT_THAT(weights[1], ElementsAreArray(held));
  std::vector<float> initial = model_->InitialWeights(options_.seed);
  EXPECT_NE(held, initial);  // Trained.
  for (int shard = 0; shard < kShards; ++shard) {
    const ServerStatus status = job->server(shard)->GetStatus();
    EXPECT_EQ(status.version, 8) << "shard " << shard;
    EXPECT_THAT(status.finished_ranks, ElementsAre(0, 1)) << "shard " << shard;
  }
}

// Records what a TrainingCallback is told.
class RecordingCallback final : public TrainingCallback {
 public:
  void OnStepEnd(const StepLogs& logs) override { steps.push_back(logs); }
  void OnEpochEnd(const EpochLogs& logs) override { epochs.push_back(logs); }
  std::vector<StepLogs> steps;
  std::vector<EpochLogs> epochs;
};

// Each step and each epoch are reported with the job's step numbers, the
// batch and running figures and the optimizer's rate; every epoch is
// evaluated on the validation set, the last one with the final weights.
TEST_F(TrainerTest, ReportsStepsAndValidatedEpochs) {
  RecordingCallback callback;
  const Dataset validation = MakeSyntheticDataset(16, 16, 4, 3);
  options_.callback = &callback;
  options_.validation = &validation;
  options_.optimizer.learning_rate = 0.05;
  Trainer trainer(options_, model_.get(), &session_, &train_, &test_);
  absl::StatusOr<TrainSummary> summary = trainer.Run();
  ASSERT_TRUE(summary.ok()) << summary.status();
  ASSERT_EQ(callback.steps.size(), 16u);
  for (size_t i = 0; i < callback.steps.size(); ++i) {
    const StepLogs& s = callback.steps[i];
    EXPECT_EQ(s.step, static_cast<int64_t>(i) + 1);
    EXPECT_GT(s.batch_loss, 0);
    EXPECT_EQ(s.batch_accuracy * kBatch, std::round(s.batch_accuracy * kBatch));
    EXPECT_EQ(s.learning_rate, 0.05);
  }
  // The first step of an epoch: its running mean is its batch's.
  EXPECT_EQ(callback.steps[8].loss, callback.steps[8].batch_loss);
  EXPECT_DOUBLE_EQ(
      callback.steps[9].loss,
      (callback.steps[8].batch_loss + callback.steps[9].batch_loss) / 2);
  ASSERT_EQ(callback.epochs.size(), 2u);
  for (int e = 0; e < 2; ++e) {
    const EpochLogs& logs = callback.epochs[e];
    EXPECT_EQ(logs.epoch, e + 1);
    EXPECT_EQ(logs.step, 8 * (e + 1));
    EXPECT_EQ(logs.loss, callback.steps[8 * e + 7].loss);
    EXPECT_EQ(logs.accuracy, callback.steps[8 * e + 7].accuracy);
    EXPECT_TRUE(logs.has_validation);
    EXPECT_GT(logs.val_loss, 0);
    EXPECT_EQ(logs.learning_rate, 0.05);
  }
  EXPECT_EQ(summary->train_loss, callback.epochs[1].loss);
  ASSERT_TRUE(model_->SetWeights(trainer.weights()).ok());
  absl::StatusOr<BatchStats> final_eval =
      model_->Evaluate(validation.features, validation.labels);
  ASSERT_TRUE(final_eval.ok()) << final_eval.status();
  EXPECT_EQ(callback.epochs[1].val_loss,
            final_eval->loss_sum / final_eval->examples);
  EXPECT_EQ(callback.epochs[1].val_accuracy,
            static_cast<double>(final_eval->correct) / final_eval->examples);
  EXPECT_NE(callback.epochs[0].val_loss, callback.epochs[1].val_loss);
}

}  // namespace
}  // namespace lockstep
