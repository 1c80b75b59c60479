// PsStepSession and PsClient against real ParameterServer shards in this
// process (InProcessShardTransport): workers on threads run synchronous
// steps, and the weights they receive are checked against SGD worked out
// by hand. No sockets, no subprocesses.
#include "worker/exchange/ps_step_session.h"

#include <algorithm>
#include <atomic>
#include <memory>
#include <thread>
#include <vector>

#include "absl/status/status.h"
#include "absl/strings/str_cat.h"
#include "common/base/status_macros.h"
#include "gmock/gmock.h"
#include "gtest/gtest.h"
#include "tests/unit/in_process_job.h"

namespace lockstep {
namespace {

using ::testing::ElementsAre;
using ::testing::ElementsAreArray;
using ::testing::HasSubstr;

constexpr int kElements = 8;
constexpr int kSteps = 3;
constexpr float kLearningRate = 0.5f;

StepSessionOptions SessionOptions(int rank, int workers) {
  StepSessionOptions o;
  o.rank = rank;
  o.num_workers = workers;
  o.rejoin_timeout = absl::Seconds(30);
  return o;
}

// Two tensors of 4 values, in chunks of 4 values: chunk 0 holds "a" and
// chunk 1 "b", one per shard when there are two.
ModelSignature TwoChunkSignature(int num_workers, int num_shards) {
  ModelSignature signature;
  signature.tensors = {{"a", {4}}, {"b", {4}}};
  signature.optimizer = OptimizerConfig::Defaults("sgd");
  signature.optimizer.learning_rate = kLearningRate;
  signature.chunk_bytes = 4 * sizeof(float);
  signature.num_workers = num_workers;
  signature.num_shards = num_shards;
  signature.total_steps = kSteps;
  return signature;
}

std::vector<float> InitialWeights() {
  std::vector<float> w(kElements);
  for (int j = 0; j < kElements; ++j) w[j] = 16.0f * (j + 1);
  return w;
}

// Rank r's gradient at step s: (r + 1)(j + 1)(s + 1) for element j.
float GradientValue(int rank, int64_t step, int j) {
  return static_cast<float>((rank + 1) * (j + 1) * (step + 1));
}

// What every worker should hold after `steps` steps of two workers:
// w - lr * (g0 + g1) / 2 each step. Every value is exact in fp32.
std::vector<float> ExpectedWeights(int steps) {
  std::vector<float> w = InitialWeights();
  for (int s = 0; s < steps; ++s) {
    for (int j = 0; j < kElements; ++j) {
      const float mean = (GradientValue(0, s, j) + GradientValue(1, s, j)) / 2;
      w[j] -= kLearningRate * mean;
    }
  }
  return w;
}

// What one worker saw.
struct WorkerRun {
  absl::Status status;
  int64_t joined_version = -1;
  std::vector<int64_t> versions;            // Step's result, by step.
  std::vector<std::vector<float>> weights;  // After each step.
  int initial_calls = 0;
};

// Joins as `rank`, runs kSteps steps (handing the gradient over in two
// halves, the second first, as backprop does), and leaves.
absl::Status RunWorker(std::unique_ptr<PsClient> client, int rank,
                       const ModelSignature& signature, WorkerRun* run) {
  PsStepSession session(SessionOptions(rank, 2), std::move(client), nullptr);
  std::vector<float> weights(kElements);
  auto initial = [run] {
    ++run->initial_calls;
    return InitialWeights();
  };
  ASSIGN_OR_RETURN(const StepOutcome joined,
                   session.Join(signature, initial, absl::MakeSpan(weights), {},
                                absl::Seconds(30)));
  run->joined_version = joined.version;
  for (int64_t step = 0; step < kSteps; ++step) {
    ASSIGN_OR_RETURN(const StepPlan plan, session.BeginStep());
    if (plan.step != step || !plan.streams ||
        plan.gradient.size() != static_cast<size_t>(kElements)) {
      return absl::InternalError("unexpected plan");
    }
    for (int j = 0; j < kElements; ++j) {
      plan.gradient[j] = GradientValue(rank, step, j);
    }
    session.GradientReady(4, 8);
    session.GradientReady(0, 4);
    ASSIGN_OR_RETURN(const StepOutcome done, session.FinishStep());
    if (!done.applied || done.rejoined || done.next_step != step + 1) {
      return absl::InternalError("unexpected outcome");
    }
    run->versions.push_back(done.version);
    run->weights.push_back(weights);
  }
  return session.Leave(LeaveNote{LeaveReason::kFinished, ""});
}

struct ClientSetting {
  int num_shards;
  int push_window;  // PsClientOptions::max_pushes_in_flight.
  bool push_thread;
};

class PsStepSessionTest : public ::testing::TestWithParam<ClientSetting> {};

TEST_P(PsStepSessionTest, TwoWorkersStepInLockstepWithTheMeanGradient) {
  const ClientSetting setting = GetParam();
  absl::StatusOr<InProcessJob> job =
      InProcessJob::Create(/*num_workers=*/2, setting.num_shards);
  ASSERT_TRUE(job.ok()) << job.status();
  PsClientOptions options;
  options.max_pushes_in_flight = setting.push_window;
  options.push_thread = setting.push_thread;
  const ModelSignature signature = TwoChunkSignature(2, setting.num_shards);
  std::vector<std::unique_ptr<PsClient>> clients;
  for (int rank = 0; rank < 2; ++rank) {
    absl::StatusOr<std::unique_ptr<PsClient>> client = job->NewClient(options);
    ASSERT_TRUE(client.ok()) << client.status();
    clients.push_back(*std::move(client));
  }
  WorkerRun runs[2];
  std::vector<std::thread> threads;
  for (int rank = 0; rank < 2; ++rank) {
    threads.emplace_back([&, rank] {
      runs[rank].status =
          RunWorker(std::move(clients[rank]), rank, signature, &runs[rank]);
    });
  }
  for (std::thread& t : threads) t.join();

  for (int rank = 0; rank < 2; ++rank) {
    const WorkerRun& run = runs[rank];
    ASSERT_TRUE(run.status.ok()) << "rank " << rank << ": " << run.status;
    EXPECT_EQ(run.joined_version, 0);
    // Only rank 0 defines version 0.
    EXPECT_EQ(run.initial_calls, rank == 0 ? 1 : 0);
    EXPECT_THAT(run.versions, ElementsAre(1, 2, 3));
    for (int s = 0; s < kSteps; ++s) {
      EXPECT_THAT(run.weights[s], ElementsAreArray(ExpectedWeights(s + 1)))
          << "rank " << rank << " after step " << s;
    }
  }
  // Every shard got its chunks from both workers every step.
  const int chunks_per_shard = 2 / setting.num_shards;
  for (int shard = 0; shard < setting.num_shards; ++shard) {
    const ServerStatus status = job->server(shard)->GetStatus();
    EXPECT_EQ(status.version, kSteps) << "shard " << shard;
    EXPECT_EQ(status.counters.pushes_accepted, 2 * kSteps * chunks_per_shard)
        << "shard " << shard;
    EXPECT_EQ(status.counters.chunk_steps, kSteps * chunks_per_shard)
        << "shard " << shard;
    EXPECT_THAT(status.finished_ranks, ElementsAre(0, 1)) << "shard " << shard;
  }
}

INSTANTIATE_TEST_SUITE_P(
    Settings, PsStepSessionTest,
    ::testing::Values(ClientSetting{1, kAutoPushWindow, false},
                      ClientSetting{2, kAutoPushWindow, false},
                      ClientSetting{2, 1, false}, ClientSetting{2, 0, true}),
    [](const ::testing::TestParamInfo<ClientSetting>& info) {
      const ClientSetting& s = info.param;
      return absl::StrCat(
          s.num_shards, "shards_window",
          s.push_window < 0 ? std::string("auto") : absl::StrCat(s.push_window),
          s.push_thread ? "_push_thread" : "");
    });

// A computation that fails abandons the step: only what was handed over
// is pushed, the shard still waits for that step, and the weights are
// read again at the job's version, so every tensor is of one version.
TEST(PsStepSessionFailureTest, AnAbandonedStepPushesOnlyWhatWasHandedOver) {
  absl::StatusOr<InProcessJob> job = InProcessJob::Create(1, 1);
  ASSERT_TRUE(job.ok()) << job.status();
  absl::StatusOr<std::unique_ptr<PsClient>> client =
      job->NewClient(PsClientOptions());
  ASSERT_TRUE(client.ok()) << client.status();
  PsStepSession session(SessionOptions(0, 1), *std::move(client), nullptr);
  std::vector<float> weights(kElements);
  ASSERT_TRUE(session
                  .Join(TwoChunkSignature(1, 1), InitialWeights,
                        absl::MakeSpan(weights), {}, absl::Seconds(30))
                  .ok());
  absl::StatusOr<StepPlan> plan = session.BeginStep();
  ASSERT_TRUE(plan.ok()) << plan.status();
  std::fill(plan->gradient.begin(), plan->gradient.end(), 1.0f);
  session.GradientReady(4, 8);  // Chunk 1 is pushed before the failure.
  ASSERT_TRUE(session.AbandonStep().ok());
  const ServerStatus status = job->server(0)->GetStatus();
  EXPECT_EQ(status.version, 0);
  EXPECT_EQ(status.counters.pushes_accepted, 1);
  EXPECT_EQ(status.counters.chunk_steps, 1);
  EXPECT_THAT(weights, ElementsAreArray(InitialWeights()));
  // A step may begin again; a second BeginStep without an end may not.
  ASSERT_TRUE(session.BeginStep().ok());
  EXPECT_EQ(session.BeginStep().status().code(),
            absl::StatusCode::kFailedPrecondition);
  ASSERT_TRUE(session.AbandonStep().ok());
}

// Eight values over five shards: chunks of at most ceil(8 / 5) = 2
// values, four of them, so shard 4 owns none and never holds a version.
// A rejoin after the job's first step must still find the job's version
// (before, shard 4's -1 read as a server that came back without the
// job's weights, and the rejoin failed).
TEST(PsStepSessionFailureTest, AShardThatOwnsNoChunkDoesNotStopARejoin) {
  absl::StatusOr<InProcessJob> job = InProcessJob::Create(1, 5);
  ASSERT_TRUE(job.ok()) << job.status();
  std::atomic<bool> refuse{false};
  std::vector<std::unique_ptr<ShardTransport>> shards;
  for (int shard = 0; shard < 5; ++shard) {
    shards.push_back(
        std::make_unique<RefusingTransport>(job->server(shard), &refuse));
  }
  absl::StatusOr<std::unique_ptr<PsClient>> client =
      PsClient::CreateOver(PsClientOptions(), std::move(shards));
  ASSERT_TRUE(client.ok()) << client.status();
  PsStepSession session(SessionOptions(0, 1), *std::move(client), nullptr);
  std::vector<float> weights(kElements);
  ASSERT_TRUE(session
                  .Join(TwoChunkSignature(1, 5), InitialWeights,
                        absl::MakeSpan(weights), {}, absl::Seconds(30))
                  .ok());
  auto step = [&]() -> absl::StatusOr<StepOutcome> {
    ASSIGN_OR_RETURN(const StepPlan plan, session.BeginStep());
    std::fill(plan.gradient.begin(), plan.gradient.end(), 1.0f);
    return session.FinishStep();
  };
  absl::StatusOr<StepOutcome> at = step();
  ASSERT_TRUE(at.ok()) << at.status();
  EXPECT_EQ(at->version, 1);
  refuse = true;
  at = step();
  refuse = false;
  ASSERT_TRUE(at.ok()) << at.status();
  EXPECT_TRUE(at->rejoined);
  EXPECT_EQ(at->version, 1);
  at = step();
  ASSERT_TRUE(at.ok()) << at.status();
  EXPECT_EQ(at->version, 2);
  EXPECT_EQ(job->server(3)->GetStatus().version, 2);
  EXPECT_EQ(job->server(4)->GetStatus().version, -1);
  // Two SGD steps of gradient 1 at rate 0.5.
  std::vector<float> expected = InitialWeights();
  for (float& w : expected) w -= 2 * kLearningRate;
  EXPECT_THAT(weights, ElementsAreArray(expected));
}

// Join refuses buffers of another size than the model's, and a job
// already past its length.
TEST(PsStepSessionFailureTest, JoinRefusesWrongBuffersAndAFinishedJob) {
  absl::StatusOr<InProcessJob> job = InProcessJob::Create(1, 1);
  ASSERT_TRUE(job.ok()) << job.status();
  absl::StatusOr<std::unique_ptr<PsClient>> client =
      job->NewClient(PsClientOptions());
  ASSERT_TRUE(client.ok()) << client.status();
  PsStepSession session(SessionOptions(0, 1), *std::move(client), nullptr);
  std::vector<float> weights(kElements), short_gradient(kElements - 1);
  absl::StatusOr<StepOutcome> joined = session.Join(
      TwoChunkSignature(1, 1), InitialWeights, absl::MakeSpan(weights),
      absl::MakeSpan(short_gradient), absl::Seconds(30));
  EXPECT_EQ(joined.status().code(), absl::StatusCode::kInvalidArgument);
  EXPECT_THAT(joined.status().message(),
              HasSubstr("the gradient buffer holds 7 values"));
  StepOutcome at;
  at.version = at.next_step = 4;
  ModelSignature three_steps = TwoChunkSignature(1, 1);
  absl::Status past = CheckNotPastEnd(three_steps, at);
  EXPECT_EQ(past.code(), absl::StatusCode::kFailedPrecondition);
  EXPECT_THAT(past.message(), HasSubstr("past this job's 3 steps"));
  at.version = at.next_step = 3;
  EXPECT_TRUE(CheckNotPastEnd(three_steps, at).ok());
}

// The session's step rules, from the signature it joined with:
// synchronous steps follow the version, asynchronous ones are the worker's
// own count.
TEST(PsStepSessionStepsTest, TheNextStepFollowsTheJobsSyncMode) {
  struct Case {
    SyncPolicy sync;
    int64_t next_after_3_at_4;  // NextStep(3, 4).
    int64_t next_after_3_at_6;  // NextStep(3, 6); -1: an error.
    int64_t after_join_at_9;    // StepAfterJoin(2, 9).
  };
  const Case cases[] = {
      {{SyncMode::kSync, 0, 0}, 4, -1, 9},
      {{SyncMode::kSync, 1, 0}, 4, 6, 9},
      {{SyncMode::kAsync, 0, 0}, 4, 4, 2},
      {{SyncMode::kSsp, 0, 2}, 4, 4, 2},
  };
  for (const Case& c : cases) {
    const std::string mode = SyncModeName(c.sync.mode);
    EXPECT_EQ(*NextPsStep(c.sync, 3, 4), c.next_after_3_at_4) << mode;
    absl::StatusOr<int64_t> next = NextPsStep(c.sync, 3, 6);
    if (c.next_after_3_at_6 < 0) {
      EXPECT_EQ(next.status().code(), absl::StatusCode::kInternal) << mode;
      EXPECT_THAT(next.status().message(),
                  HasSubstr("step 3 was answered with version 6"));
    } else {
      EXPECT_EQ(*next, c.next_after_3_at_6) << mode;
    }
    EXPECT_EQ(PsStepAfterJoin(c.sync, 2, 9), c.after_join_at_9) << mode;
  }
}

// Registering with a client of the wrong shard count says so.
TEST(PsStepSessionFailureTest, AShardCountThatDiffersIsRefused) {
  absl::StatusOr<InProcessJob> job = InProcessJob::Create(1, 1);
  ASSERT_TRUE(job.ok()) << job.status();
  absl::StatusOr<std::unique_ptr<PsClient>> client =
      job->NewClient(PsClientOptions());
  ASSERT_TRUE(client.ok()) << client.status();
  absl::StatusOr<RegisterResult> reg =
      (*client)->Register(0, TwoChunkSignature(1, 2));
  EXPECT_EQ(reg.status().code(), absl::StatusCode::kInvalidArgument);
  EXPECT_THAT(reg.status().message(),
              HasSubstr("the signature says 2 shard(s) but 1 server"));
}

}  // namespace
}  // namespace lockstep
