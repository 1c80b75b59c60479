// AllReduceStepSession with two ranks as threads, gloo over loopback,
// meeting at an in-process Coordinator: the steps' weights against SGD
// worked out by hand, and the ranks' agreement on a stop carried in the
// session's own summed buffer.
#include "worker/exchange/allreduce_step_session.h"

#include <atomic>
#include <limits>
#include <memory>
#include <string>
#include <vector>

#include "gmock/gmock.h"
#include "gtest/gtest.h"
#include "tests/unit/in_process_coordinator.h"

namespace lockstep {
namespace {

using ::testing::ElementsAre;
using ::testing::ElementsAreArray;
using ::testing::HasSubstr;

constexpr int kRanks = 2;
constexpr int kElements = 6;
constexpr float kLearningRate = 0.5f;

ModelSignature Signature(int64_t total_steps) {
  ModelSignature signature;
  signature.tensors = {{"w", {kElements}}};
  signature.optimizer = OptimizerConfig::Defaults("sgd");
  signature.optimizer.learning_rate = kLearningRate;
  signature.num_workers = kRanks;
  signature.total_steps = total_steps;
  return signature;
}

std::vector<float> Initial() {
  std::vector<float> w(kElements);
  for (int j = 0; j < kElements; ++j) w[j] = 8.0f * (j + 1);
  return w;
}

// Rank r's gradient at step s, exact in fp32.
float Gradient(int rank, int64_t step, int j) {
  return static_cast<float>((rank + 1) * (j + 1) * (step + 1));
}

std::unique_ptr<AllReduceStepSession> NewSession(
    int rank, const InProcessCoordinator& coordinator,
    const std::atomic<bool>* stop) {
  StepSessionOptions o;
  o.allreduce = true;
  o.rank = rank;
  o.num_workers = kRanks;
  o.reducer.backend = "gloo";
  o.reducer.rank = rank;
  o.reducer.size = kRanks;
  o.reducer.coordinator = coordinator.address();
  o.reducer.group = "session-test";
  o.reducer.rendezvous_timeout = absl::Seconds(30);
  o.reducer.op_timeout = absl::Seconds(30);
  o.stop_requested = stop;
  absl::StatusOr<std::unique_ptr<CoordinatorClient>> client =
      CoordinatorClient::Create(coordinator.address(), TlsOptions());
  EXPECT_TRUE(client.ok()) << client.status();
  return std::make_unique<AllReduceStepSession>(o, nullptr, *std::move(client));
}

// What a rank saw.
struct RankRun {
  absl::Status status;
  std::vector<int64_t> versions;
  std::vector<float> weights = std::vector<float>(kElements);
  bool stopping_after_last = false;
  std::vector<std::vector<int>> shards;
};

// Runs steps until the session stops or `steps` are done; rank 1's
// gradient at step `nan_step` has a NaN.
void RunRank(AllReduceStepSession* session, int rank, int steps, RankRun* run,
             int64_t nan_step = -1) {
  absl::StatusOr<StepOutcome> at =
      session->Join(Signature(steps), Initial, absl::MakeSpan(run->weights), {},
                    absl::Seconds(30));
  if (!at.ok()) {
    run->status = at.status();
    return;
  }
  while (at->next_step < steps && !session->Stopping()) {
    absl::StatusOr<StepPlan> plan = session->BeginStep();
    if (!plan.ok()) {
      run->status = plan.status();
      return;
    }
    run->shards.push_back(plan->batch_shards);
    for (int j = 0; j < kElements; ++j) {
      plan->gradient[j] = Gradient(rank, plan->step, j);
    }
    if (rank == 1 && plan->step == nan_step) {
      plan->gradient[4] = std::numeric_limits<float>::quiet_NaN();
    }
    at = session->FinishStep();
    if (!at.ok()) {
      run->status = at.status();
      return;
    }
    run->versions.push_back(at->version);
  }
  run->stopping_after_last = session->Stopping();
  run->status = session->Leave(LeaveNote{LeaveReason::kFinished, ""});
}

TEST(AllReduceStepSessionTest, TwoRanksApplyTheMeanGradientEveryStep) {
  InProcessCoordinator coordinator;
  RankRun runs[kRanks];
  RunRanks(kRanks, [&](int rank) {
    std::unique_ptr<AllReduceStepSession> session =
        NewSession(rank, coordinator, nullptr);
    RunRank(session.get(), rank, 3, &runs[rank]);
  });
  std::vector<float> want = Initial();
  for (int s = 0; s < 3; ++s) {
    for (int j = 0; j < kElements; ++j) {
      want[j] -= kLearningRate * (Gradient(0, s, j) + Gradient(1, s, j)) / 2;
    }
  }
  for (int rank = 0; rank < kRanks; ++rank) {
    const RankRun& run = runs[rank];
    ASSERT_TRUE(run.status.ok()) << "rank " << rank << ": " << run.status;
    EXPECT_THAT(run.versions, ElementsAre(1, 2, 3)) << "rank " << rank;
    EXPECT_THAT(run.weights, ElementsAreArray(want)) << "rank " << rank;
    EXPECT_FALSE(run.stopping_after_last);
    // Each rank computes its own shard, summed locally.
    for (const std::vector<int>& shards : run.shards) {
      EXPECT_THAT(shards, ElementsAre(rank));
    }
  }
}

// Rank 1 is asked to stop before its first step: that step is still
// taken by both (the request rides in the step's sum), and after it both
// ranks agree to stop, so neither waits for the other in a step it will not
// take.
TEST(AllReduceStepSessionTest, AStopOnOneRankStopsBothAfterTheSameStep) {
  InProcessCoordinator coordinator;
  std::atomic<bool> stop{true};
  RankRun runs[kRanks];
  RunRanks(kRanks, [&](int rank) {
    std::unique_ptr<AllReduceStepSession> session =
        NewSession(rank, coordinator, rank == 1 ? &stop : nullptr);
    RunRank(session.get(), rank, 5, &runs[rank]);
  });
  for (int rank = 0; rank < kRanks; ++rank) {
    const RankRun& run = runs[rank];
    ASSERT_TRUE(run.status.ok()) << "rank " << rank << ": " << run.status;
    EXPECT_THAT(run.versions, ElementsAre(1)) << "rank " << rank;
    EXPECT_TRUE(run.stopping_after_last) << "rank " << rank;
  }
  EXPECT_EQ(runs[0].weights, runs[1].weights);
}

// Rank 1's gradient of step 1 holds a NaN: both ranks refuse the summed
// step (INVALID_ARGUMENT, as a parameter server refuses such a push) and
// keep the weights of version 1, the last good step.
TEST(AllReduceStepSessionTest, ANonFiniteSumIsRefusedOnEveryRank) {
  InProcessCoordinator coordinator;
  RankRun runs[kRanks];
  RunRanks(kRanks, [&](int rank) {
    std::unique_ptr<AllReduceStepSession> session =
        NewSession(rank, coordinator, nullptr);
    RunRank(session.get(), rank, 3, &runs[rank], /*nan_step=*/1);
  });
  std::vector<float> want = Initial();
  for (int j = 0; j < kElements; ++j) {
    want[j] -= kLearningRate * (Gradient(0, 0, j) + Gradient(1, 0, j)) / 2;
  }
  for (int rank = 0; rank < kRanks; ++rank) {
    const RankRun& run = runs[rank];
    EXPECT_EQ(run.status.code(), absl::StatusCode::kInvalidArgument)
        << "rank " << rank << ": " << run.status;
    EXPECT_THAT(run.status.message(),
                HasSubstr("the summed gradient of step 1 is not finite "
                          "(element 4 is nan (not finite))"));
    EXPECT_THAT(run.versions, ElementsAre(1)) << "rank " << rank;
    EXPECT_THAT(run.weights, ElementsAreArray(want)) << "rank " << rank;
  }
}

}  // namespace
}  // namespace lockstep
