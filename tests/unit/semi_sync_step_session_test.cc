// SemiSyncStepSession (LocalSGD, DiLoCo) against real ParameterServer
// shards in this process: two workers on threads take local steps of SGD,
// and the versions the servers publish are checked against the rounds
// worked out by hand (every value exact in fp32). No sockets.
#include "worker/exchange/semi_sync_step_session.h"

#include <atomic>
#include <memory>
#include <string>
#include <thread>
#include <utility>
#include <vector>

#include "absl/status/status.h"
#include "absl/strings/str_cat.h"
#include "absl/time/clock.h"
#include "common/base/env.h"
#include "common/base/status_macros.h"
#include "gmock/gmock.h"
#include "gtest/gtest.h"
#include "tests/unit/in_process_job.h"
#include "worker/exchange/ps_step_session.h"

namespace lockstep {
namespace {

using ::testing::ElementsAre;
using ::testing::ElementsAreArray;
using ::testing::HasSubstr;

constexpr int kElements = 8;
constexpr int kSteps = 5;       // Local steps: rounds [0, 2), [2, 4), [4].
constexpr int kLocalSteps = 2;
constexpr float kInnerRate = 0.5f;

// Rank r's gradient at local step s: (r + 1)(j + 1)(s + 1) - 8 for
// element j (whatever the weights: the plumbing is under test).
float GradientValue(int rank, int64_t step, int j) {
  return static_cast<float>((rank + 1) * (j + 1) * (step + 1)) - 8.0f;
}

std::vector<float> InitialWeights() {
  std::vector<float> w(kElements);
  for (int j = 0; j < kElements; ++j) w[j] = 4.0f * (j + 1);
  return w;
}

// The servers' optimizer: LocalSGD's averaging, or DiLoCo's Nesterov
// momentum (rate 0.5, momentum 0.5: exact in fp32).
OptimizerConfig Outer(bool diloco) {
  OptimizerConfig outer = OptimizerConfig::Defaults(diloco ? "momentum" : "sgd");
  outer.learning_rate = diloco ? 0.5 : 1.0;
  outer.momentum = diloco ? 0.5 : 0.0;
  outer.nesterov = diloco;
  return outer;
}

// The weights after each round, by hand: each rank runs SGD from the
// round's version over its local steps; LocalSGD's next version is the mean
// of the two ranks' weights, DiLoCo's takes one Nesterov step on the mean
// change d (v = 0.5 v - 0.5 d; w += 0.5 v - 0.5 d).
std::vector<std::vector<float>> ExpectedRounds(bool diloco) {
  std::vector<std::vector<float>> rounds;
  std::vector<float> w = InitialWeights();
  std::vector<float> velocity(kElements, 0.0f);
  for (int start = 0; start < kSteps; start += kLocalSteps) {
    const int end = std::min(start + kLocalSteps, kSteps);
    std::vector<float> local[2] = {w, w};
    for (int rank = 0; rank < 2; ++rank) {
      for (int s = start; s < end; ++s) {
        for (int j = 0; j < kElements; ++j) {
          local[rank][j] -= kInnerRate * GradientValue(rank, s, j);
        }
      }
    }
    for (int j = 0; j < kElements; ++j) {
      if (!diloco) {
        w[j] = (local[0][j] + local[1][j]) / 2;
        continue;
      }
      const float change = ((w[j] - local[0][j]) + (w[j] - local[1][j])) / 2;
      velocity[j] = 0.5f * velocity[j] - 0.5f * change;
      w[j] += 0.5f * velocity[j] - 0.5f * change;
    }
    rounds.push_back(w);
  }
  return rounds;
}

ModelSignature JobSignature(int num_shards) {
  ModelSignature signature;
  signature.tensors = {{"a", {4}}, {"b", {4}}};
  signature.optimizer = OptimizerConfig::Defaults("sgd");  // The inner one.
  signature.optimizer.learning_rate = kInnerRate;
  signature.chunk_bytes = 4 * sizeof(float);
  signature.num_workers = 2;
  signature.num_shards = num_shards;
  signature.total_steps = kSteps;
  return signature;
}

StepSessionOptions SessionOptions(int rank, bool diloco, int local_steps) {
  StepSessionOptions o;
  o.rank = rank;
  o.num_workers = 2;
  o.rejoin_timeout = absl::Seconds(30);
  o.local_steps = local_steps;
  o.outer_optimizer = Outer(diloco);
  return o;
}

struct WorkerRun {
  absl::Status status;
  std::vector<int64_t> steps;     // Each plan's step.
  std::vector<int64_t> versions;  // Each outcome's version.
  std::vector<int64_t> next;      // Each outcome's next step.
  std::vector<std::vector<float>> weights;  // After each step.
};

absl::Status RunWorker(std::unique_ptr<PsClient> client, int rank, bool diloco,
                       const ModelSignature& signature, WorkerRun* run) {
  SemiSyncStepSession session(
      SessionOptions(rank, diloco, kLocalSteps),
      std::make_unique<PsStepSession>(SessionOptions(rank, diloco, 0),
                                      std::move(client), nullptr));
  std::vector<float> weights(kElements);
  ASSIGN_OR_RETURN(StepOutcome at,
                   session.Join(signature, InitialWeights,
                                absl::MakeSpan(weights), {},
                                absl::Seconds(30)));
  if (at.version != 0 || at.next_step != 0) {
    return absl::InternalError("joined elsewhere than at the start");
  }
  while (at.next_step < kSteps) {
    ASSIGN_OR_RETURN(const StepPlan plan, session.BeginStep());
    if (plan.streams || plan.batch_shards != std::vector<int>{rank} ||
        plan.gradient.size() != static_cast<size_t>(kElements)) {
      return absl::InternalError("unexpected plan");
    }
    run->steps.push_back(plan.step);
    for (int j = 0; j < kElements; ++j) {
      plan.gradient[j] = GradientValue(rank, plan.step, j);
    }
    ASSIGN_OR_RETURN(at, session.FinishStep());
    if (!at.applied || at.rejoined || at.stopped) {
      return absl::InternalError("unexpected outcome");
    }
    run->versions.push_back(at.version);
    run->next.push_back(at.next_step);
    run->weights.push_back(weights);
  }
  return session.Leave(LeaveNote{LeaveReason::kFinished, ""});
}

struct Setting {
  bool diloco;
  int num_shards;
};

class SemiSyncStepSessionTest : public ::testing::TestWithParam<Setting> {};

TEST_P(SemiSyncStepSessionTest, RoundsOfLocalStepsMeetInTheOuterOptimizer) {
  const Setting setting = GetParam();
  absl::StatusOr<InProcessJob> job = InProcessJob::Create(2, setting.num_shards);
  ASSERT_TRUE(job.ok()) << job.status();
  const ModelSignature signature = JobSignature(setting.num_shards);
  std::vector<std::unique_ptr<PsClient>> clients;
  for (int rank = 0; rank < 2; ++rank) {
    absl::StatusOr<std::unique_ptr<PsClient>> client =
        job->NewClient(PsClientOptions());
    ASSERT_TRUE(client.ok()) << client.status();
    clients.push_back(*std::move(client));
  }
  WorkerRun runs[2];
  std::vector<std::thread> threads;
  for (int rank = 0; rank < 2; ++rank) {
    threads.emplace_back([&, rank] {
      runs[rank].status = RunWorker(std::move(clients[rank]), rank,
                                    setting.diloco, signature, &runs[rank]);
    });
  }
  for (std::thread& t : threads) t.join();

  const std::vector<std::vector<float>> rounds = ExpectedRounds(setting.diloco);
  ASSERT_EQ(rounds.size(), 3u);
  for (int rank = 0; rank < 2; ++rank) {
    const WorkerRun& run = runs[rank];
    ASSERT_TRUE(run.status.ok()) << "rank " << rank << ": " << run.status;
    EXPECT_THAT(run.steps, ElementsAre(0, 1, 2, 3, 4));
    // Versions count rounds; the short last round ends the job.
    EXPECT_THAT(run.versions, ElementsAre(0, 1, 1, 2, 3));
    EXPECT_THAT(run.next, ElementsAre(1, 2, 3, 4, 5));
    ASSERT_EQ(run.weights.size(), 5u);
    // Within a round the weights are the worker's own SGD steps.
    std::vector<float> own = InitialWeights();
    for (int j = 0; j < kElements; ++j) own[j] -= kInnerRate * GradientValue(rank, 0, j);
    EXPECT_THAT(run.weights[0], ElementsAreArray(own)) << "rank " << rank;
    EXPECT_THAT(run.weights[1], ElementsAreArray(rounds[0])) << "rank " << rank;
    EXPECT_THAT(run.weights[3], ElementsAreArray(rounds[1])) << "rank " << rank;
    EXPECT_THAT(run.weights[4], ElementsAreArray(rounds[2])) << "rank " << rank;
  }
  // The servers count rounds and hold what the workers were told.
  for (int shard = 0; shard < setting.num_shards; ++shard) {
    const ServerStatus status = job->server(shard)->GetStatus();
    EXPECT_EQ(status.version, 3) << "shard " << shard;
    EXPECT_THAT(status.finished_ranks, ElementsAre(0, 1)) << "shard " << shard;
  }
}

INSTANTIATE_TEST_SUITE_P(
    Modes, SemiSyncStepSessionTest,
    ::testing::Values(Setting{false, 1}, Setting{true, 1}, Setting{true, 2}),
    [](const ::testing::TestParamInfo<Setting>& info) {
      return absl::StrCat(info.param.diloco ? "diloco" : "localsgd", "_",
                          info.param.num_shards, "shards");
    });

// A worker whose rounds differ from the job's (another --local_steps, or
// the synchronous mode) is refused at registration, with the difference.
TEST(SemiSyncStepSessionJoinTest, AWorkerWithOtherRoundsIsRefused) {
  absl::StatusOr<InProcessJob> job = InProcessJob::Create(2, 1);
  ASSERT_TRUE(job.ok()) << job.status();
  auto session = [&](int rank, int local_steps) -> std::unique_ptr<StepSession> {
    absl::StatusOr<std::unique_ptr<PsClient>> client =
        job->NewClient(PsClientOptions());
    EXPECT_TRUE(client.ok()) << client.status();
    auto ps = std::make_unique<PsStepSession>(
        SessionOptions(rank, true, 0), *std::move(client), nullptr);
    if (local_steps < 2) return ps;
    return std::make_unique<SemiSyncStepSession>(
        SessionOptions(rank, true, local_steps), std::move(ps));
  };
  const ModelSignature signature = JobSignature(1);
  std::vector<float> w0(kElements), w1(kElements), w2(kElements);
  std::unique_ptr<StepSession> first = session(0, kLocalSteps);
  absl::StatusOr<StepOutcome> joined =
      first->Join(signature, InitialWeights, absl::MakeSpan(w0), {},
                  absl::Seconds(30));
  ASSERT_TRUE(joined.ok()) << joined.status();
  EXPECT_EQ(joined->next_step, 0);

  absl::StatusOr<StepOutcome> other =
      session(1, 3)->Join(signature, InitialWeights, absl::MakeSpan(w1), {},
                          absl::Seconds(30));
  ASSERT_FALSE(other.ok());
  EXPECT_THAT(other.status().message(), HasSubstr("local_steps=2"));
  EXPECT_THAT(other.status().message(), HasSubstr("local_steps=3"));

  absl::StatusOr<StepOutcome> plain =
      session(1, 0)->Join(signature, InitialWeights, absl::MakeSpan(w2), {},
                          absl::Seconds(30));
  ASSERT_FALSE(plain.ok());
  EXPECT_THAT(plain.status().message(), HasSubstr("local_steps=1"));
}

// One worker's rounds over `client`, joined at version 0 into `weights`
// (kElements values); `env` is the rejoin deadline's clock.
absl::StatusOr<std::unique_ptr<SemiSyncStepSession>> JoinedAlone(
    std::unique_ptr<PsClient> client, Env* env, std::vector<float>* weights) {
  StepSessionOptions options = SessionOptions(0, false, 0);
  options.num_workers = 1;
  options.env = env;
  auto session = std::make_unique<SemiSyncStepSession>(
      SessionOptions(0, false, kLocalSteps),
      std::make_unique<PsStepSession>(options, std::move(client), nullptr));
  ModelSignature signature = JobSignature(1);
  signature.num_workers = 1;
  weights->assign(kElements, 0.0f);
  ASSIGN_OR_RETURN(StepOutcome at, session->Join(signature, InitialWeights,
                                                 absl::MakeSpan(*weights), {},
                                                 absl::Seconds(30)));
  if (at.version != 0 || at.next_step != 0) {
    return absl::InternalError("joined elsewhere than at the start");
  }
  return session;
}

// The rejoin deadline (30 s here) leaves out a round's local steps: a
// round whose local steps took 40 s still registers again when its push
// is refused, and starts over from its version (before, the refusal was
// fatal: "no step succeeded in 30s").
TEST(SemiSyncStepSessionRejoinTest, ARoundLongerThanTheRejoinTimeoutRejoins) {
  absl::StatusOr<InProcessJob> job = InProcessJob::Create(1, 1);
  ASSERT_TRUE(job.ok()) << job.status();
  std::atomic<bool> refuse{false};
  std::vector<std::unique_ptr<ShardTransport>> shards;
  shards.push_back(
      std::make_unique<RefusingTransport>(job->server(0), &refuse));
  absl::StatusOr<std::unique_ptr<PsClient>> client =
      PsClient::CreateOver(PsClientOptions(), std::move(shards));
  ASSERT_TRUE(client.ok()) << client.status();
  FakeEnv env;
  std::vector<float> weights;
  absl::StatusOr<std::unique_ptr<SemiSyncStepSession>> session =
      JoinedAlone(*std::move(client), &env, &weights);
  ASSERT_TRUE(session.ok()) << session.status();
  auto step = [&](absl::Duration local_time) -> absl::StatusOr<StepOutcome> {
    ASSIGN_OR_RETURN(const StepPlan plan, (*session)->BeginStep());
    for (int j = 0; j < kElements; ++j) {
      plan.gradient[j] = GradientValue(0, plan.step, j);
    }
    env.Advance(local_time);
    return (*session)->FinishStep();
  };
  absl::StatusOr<StepOutcome> at = step(absl::Seconds(40));  // Local step 0.
  ASSERT_TRUE(at.ok()) << at.status();
  EXPECT_EQ(at->next_step, 1);
  refuse = true;
  at = step(absl::Seconds(1));  // Step 1: the push, refused.
  ASSERT_TRUE(at.ok()) << at.status();
  EXPECT_TRUE(at->rejoined);
  EXPECT_EQ(at->version, 0);
  EXPECT_EQ(at->next_step, 0);
  EXPECT_THAT(weights, ElementsAreArray(InitialWeights()));
  refuse = false;
  for (int s = 0; s < 2; ++s) {
    at = step(absl::Seconds(40));
    ASSERT_TRUE(at.ok()) << at.status();
  }
  EXPECT_EQ(at->version, 1);
  EXPECT_EQ(at->next_step, 2);
  EXPECT_EQ((*session)->rejoins(), 1);
  // Every push refused from here: the local steps do not count against
  // the deadline, but the pushes (1 s each) and the rejoins' backoff do,
  // so the worker gives up (before, each round's push restarted the
  // deadline, and it went on forever).
  refuse = true;
  int rounds = 0;
  for (; rounds < 40 && at.ok(); ++rounds) {
    at = step(absl::Seconds(40));  // The round's local step.
    ASSERT_TRUE(at.ok()) << at.status();
    at = step(absl::Seconds(1));  // Its push.
  }
  ASSERT_FALSE(at.ok()) << "still rejoining after " << rounds << " rounds";
  EXPECT_THAT(at.status().message(),
              ::testing::AnyOf(HasSubstr("no step succeeded in 30s"),
                               HasSubstr("gave up registering again")));
  EXPECT_GE(rounds, 5);
}

// The phases a round reports (the straggler verdict's) cover its local
// steps, so that they explain its lateness to the servers' barrier: each
// step's input (to InputReady) and compute (the rest). One worker, rounds
// of 2 steps: the first takes 40 ms of input and 60 of compute, the last
// 10 and 20, so a round has 50 ms of input and 80 of compute. The servers
// hold the reports of rounds 0 and 1 (each goes with the next round's
// pushes). Before, the round's earlier steps were all input (the verdict
// named input for a rank slow in compute); then only the last step was
// reported (it named the network: lateness its phases did not explain).
TEST(SemiSyncStepSessionReportTest, ARoundReportsItsLocalStepsPhases) {
  absl::StatusOr<InProcessJob> job = InProcessJob::Create(1, 1);
  ASSERT_TRUE(job.ok()) << job.status();
  absl::StatusOr<std::unique_ptr<PsClient>> client =
      job->NewClient(PsClientOptions());
  ASSERT_TRUE(client.ok()) << client.status();
  std::vector<float> weights;
  absl::StatusOr<std::unique_ptr<SemiSyncStepSession>> joined =
      JoinedAlone(*std::move(client), Env::Default(), &weights);
  ASSERT_TRUE(joined.ok()) << joined.status();
  SemiSyncStepSession& session = **joined;
  absl::StatusOr<StepOutcome> at = StepOutcome();
  while (at->next_step < kSteps) {
    absl::StatusOr<StepPlan> plan = session.BeginStep();
    ASSERT_TRUE(plan.ok()) << plan.status();
    const bool last = plan->step % kLocalSteps == kLocalSteps - 1;
    absl::SleepFor(absl::Milliseconds(last ? 10 : 40));
    session.InputReady();
    absl::SleepFor(absl::Milliseconds(last ? 20 : 60));
    for (int j = 0; j < kElements; ++j) {
      plan->gradient[j] = GradientValue(0, plan->step, j);
    }
    at = session.FinishStep();
    ASSERT_TRUE(at.ok()) << at.status();
  }
  ASSERT_EQ(at->version, 3);
  const ServerStatus status = job->server(0)->GetStatus();
  ASSERT_EQ(status.workers.size(), 1u);
  const ActivityWindow& window = status.workers[0].window;
  ASSERT_EQ(window.reports, 2);
  // The window's medians; the upper bounds leave a loaded machine 50 and
  // 80 ms, below what counting a step twice would add.
  EXPECT_GE(window.input, absl::Milliseconds(50));
  EXPECT_LT(window.input, absl::Milliseconds(100));
  EXPECT_GE(window.compute, absl::Milliseconds(80));
  EXPECT_LT(window.compute, absl::Milliseconds(160));
}

}  // namespace
}  // namespace lockstep
