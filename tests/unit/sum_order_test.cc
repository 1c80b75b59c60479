// SumOrder::kRank: a synchronous step sums its gradients in ascending rank
// whatever order they arrive in. The gradients below are chosen so that the
// order shows in the result: in float, (1e8 + 1) - 1e8 is 0 but
// (1e8 - 1e8) + 1 is 1.
#include <algorithm>
#include <optional>
#include <random>
#include <string>
#include <vector>

#include "gmock/gmock.h"
#include "gtest/gtest.h"
#include "server/core/chunk_barrier.h"
#include "tests/unit/chunk_reply_test_util.h"

namespace lockstep {
namespace {

using ::testing::ElementsAre;

// A 2-element chunk with plain SGD (lr 0.5), weights {10, 20}.
std::unique_ptr<ChunkBarrier> Make(SumOrder order, int workers,
                                   BarrierCounters* counters,
                                   int backup_workers = 0) {
  OptimizerConfig sgd = OptimizerConfig::Defaults("sgd");
  sgd.learning_rate = 0.5;
  SyncPolicy policy;
  policy.backup_workers = backup_workers;
  auto barrier = std::make_unique<ChunkBarrier>(
      Chunk{0, 0, 2, 0}, policy, workers, sgd, counters,
      /*observer=*/nullptr, order);
  const std::vector<float> w0 = {10, 20};
  EXPECT_TRUE(barrier->Initialize(Bytes(w0)).ok());
  return barrier;
}

// Pushes gradients[rank] for every rank in `arrival` order at `step`, each
// in two pieces (the payload may straddle gRPC slices; the held copy must
// join them), and returns the weights the step published.
std::vector<float> RunStep(ChunkBarrier& b, int64_t step,
                           const std::vector<std::vector<float>>& gradients,
                           const std::vector<int>& arrival) {
  std::vector<Reply> replies(gradients.size());
  for (int rank : arrival) {
    const absl::string_view bytes = Bytes(gradients[rank]);
    const absl::string_view pieces[2] = {bytes.substr(0, 3), bytes.substr(3)};
    b.Push(rank, step, WireDType::kFloat32, pieces, absl::Now(),
           replies[rank].Callback());
  }
  EXPECT_TRUE(replies[arrival.front()].ok()) << "the step did not close";
  return replies[arrival.front()].values();
}

const std::vector<std::vector<float>> kCancelling = {
    {1e8f, 0.25f}, {1.0f, 0.5f}, {-1e8f, 1.0f}, {1.0f, 2.0f}};

TEST(SumOrderTest, RankOrderGivesTheSameBitsForEveryArrivalOrder) {
  BarrierCounters counters;
  std::vector<int> arrival = {0, 1, 2, 3};
  do {
    auto b = Make(SumOrder::kRank, 4, &counters);
    // ((1e8 + 1) - 1e8) + 1 = 1 in float; mean 1/4; 10 - 0.5 / 4.
    // (0.25 + 0.5 + 1 + 2) / 4 = 0.9375; 20 - 0.5 * 0.9375.
    EXPECT_THAT(RunStep(*b, 0, kCancelling, arrival),
                ElementsAre(9.875f, 19.53125f))
        << "arrival " << arrival[0] << arrival[1] << arrival[2] << arrival[3];
  } while (std::next_permutation(arrival.begin(), arrival.end()));
}

// The data above does show the order: summed as they arrive, two orders
// give two results (so the test above can fail).
TEST(SumOrderTest, ArrivalOrderShowsInTheResult) {
  BarrierCounters counters;
  auto in_rank_order = Make(SumOrder::kArrival, 4, &counters);
  auto cancelling_first = Make(SumOrder::kArrival, 4, &counters);
  EXPECT_THAT(RunStep(*in_rank_order, 0, kCancelling, {0, 1, 2, 3}),
              ElementsAre(9.875f, 19.53125f));
  // (1e8 - 1e8) + 1 + 1 = 2: mean 1/2, 10 - 0.25.
  EXPECT_THAT(RunStep(*cancelling_first, 0, kCancelling, {2, 0, 1, 3}),
              ElementsAre(9.75f, 19.53125f));
}

// Random data, 8 workers, several steps: rank order in any arrival order
// equals arrival order when the pushes come in rank order, bit for bit.
TEST(SumOrderTest, RandomArrivalsMatchPushesInRankOrder) {
  constexpr int kWorkers = 8;
  std::mt19937 rng(1234);
  std::normal_distribution<float> normal(0.0f, 1.0f);
  BarrierCounters counters;
  auto ordered = Make(SumOrder::kRank, kWorkers, &counters);
  auto reference = Make(SumOrder::kArrival, kWorkers, &counters);
  std::vector<int> in_order(kWorkers);
  for (int r = 0; r < kWorkers; ++r) in_order[r] = r;
  for (int64_t step = 0; step < 5; ++step) {
    std::vector<std::vector<float>> grads(kWorkers);
    for (auto& g : grads) g = {normal(rng) * 1e3f, normal(rng) * 1e-3f};
    std::vector<int> arrival = in_order;
    std::shuffle(arrival.begin(), arrival.end(), rng);
    const std::vector<float> got = RunStep(*ordered, step, grads, arrival);
    const std::vector<float> want = RunStep(*reference, step, grads, in_order);
    EXPECT_EQ(got, want) << "step " << step;
  }
}

// With backup workers a step closes without the slowest: what was held
// behind the missing rank is summed at the close, still in rank order.
TEST(SumOrderTest, BackupWorkersSumWhatCameInRankOrder) {
  BarrierCounters counters;
  auto b = Make(SumOrder::kRank, 4, &counters, /*backup_workers=*/1);
  Reply r3, r1, r2, late;
  const std::vector<float> g1 = {1e8f, 3}, g2 = {1, 3}, g3 = {-1e8f, 3};
  b->Push(3, 0, WireDType::kFloat32, {Bytes(g3)}, absl::Now(), r3.Callback());
  b->Push(1, 0, WireDType::kFloat32, {Bytes(g1)}, absl::Now(), r1.Callback());
  EXPECT_FALSE(r3.result.has_value());
  b->Push(2, 0, WireDType::kFloat32, {Bytes(g2)}, absl::Now(), r2.Callback());
  ASSERT_TRUE(r2.ok());
  // (1e8 + 1) - 1e8 = 0 (arrival order would give 1): 10 stays; 20 - 0.5 * 3.
  EXPECT_THAT(r2.values(), ElementsAre(10.0f, 18.5f));
  const std::vector<float> g0 = {1000, 1000};
  b->Push(0, 0, WireDType::kFloat32, {Bytes(g0)}, absl::Now(), late.Callback());
  ASSERT_TRUE(late.ok());
  EXPECT_THAT(late.values(), ElementsAre(10.0f, 18.5f)) << "dropped";
}

// A re-sent push of a held rank is counted once.
TEST(SumOrderTest, AReSentHeldPushCountsOnce) {
  BarrierCounters counters;
  auto b = Make(SumOrder::kRank, 3, &counters);
  Reply first, again, r0, r1;
  const std::vector<float> g0 = {1, 2}, g1 = {3, 4}, g2 = {8, 6};
  b->Push(2, 0, WireDType::kFloat32, {Bytes(g2)}, absl::Now(),
          first.Callback());
  b->Push(2, 0, WireDType::kFloat32, {Bytes(g2)}, absl::Now(),
          again.Callback());
  b->Push(0, 0, WireDType::kFloat32, {Bytes(g0)}, absl::Now(), r0.Callback());
  EXPECT_FALSE(r0.result.has_value());
  b->Push(1, 0, WireDType::kFloat32, {Bytes(g1)}, absl::Now(), r1.Callback());
  ASSERT_TRUE(first.ok() && again.ok() && r0.ok() && r1.ok());
  // Mean (4, 4): 10 - 2, 20 - 2.
  EXPECT_THAT(r1.values(), ElementsAre(8.0f, 18.0f));
  EXPECT_EQ(again.values(), r1.values());
}

// A step given up on while every push was held has summed nothing: the
// chunk still has the previous version's weights for an exact pull, and
// nothing held leaks into the retried step.
TEST(SumOrderTest, AnExpiredStepOfHeldPushesKeepsThePreviousWeights) {
  BarrierCounters counters;
  auto b = Make(SumOrder::kRank, 3, &counters);
  const std::vector<std::vector<float>> grads = {{2, 4}, {4, 8}, {6, 12}};
  // Step 0: mean (4, 8); 10 - 2, 20 - 4.
  EXPECT_THAT(RunStep(*b, 0, grads, {0, 1, 2}), ElementsAre(8.0f, 16.0f));
  Reply lost2, lost1;
  const std::vector<float> big = {1000, 1000};
  b->Push(2, 1, WireDType::kFloat32, {Bytes(big)}, absl::Now(),
          lost2.Callback());
  b->Push(1, 1, WireDType::kFloat32, {Bytes(big)}, absl::Now(),
          lost1.Callback());
  ASSERT_TRUE(b->Expire(1, absl::AbortedError("step 1 expired")));
  ASSERT_TRUE(lost1.result.has_value());
  EXPECT_EQ(lost1.result->status().code(), absl::StatusCode::kAborted);
  Reply exact;
  b->Pull(0, /*exact=*/true, exact.Callback());
  ASSERT_TRUE(exact.ok());
  EXPECT_EQ((*exact.result)->version, 0);
  EXPECT_THAT(exact.values(), ElementsAre(10.0f, 20.0f));
  // Step 1 again: mean (4, 8) from (8, 16).
  EXPECT_THAT(RunStep(*b, 1, grads, {2, 1, 0}), ElementsAre(6.0f, 12.0f));
}

}  // namespace
}  // namespace lockstep
