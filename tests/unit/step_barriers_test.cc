// StepBarriers alone: adopting the job's signature (rank 0's wins over a
// provisional one), the layouts it publishes, restores, drains, shutdowns
// and giving a gathered step up.
#include "server/core/step_barriers.h"

#include <limits>
#include <string>
#include <utility>
#include <vector>

#include "absl/status/status.h"
#include "gmock/gmock.h"
#include "gtest/gtest.h"
#include "tests/unit/chunk_reply_test_util.h"
#include "tests/unit/parameter_server_test_util.h"

namespace lockstep {
namespace {

using ::testing::ElementsAre;
using ::testing::StartsWith;

ParameterServerOptions Options(int workers, int shard = 0, int shards = 1) {
  ParameterServerOptions options;
  options.num_workers = workers;
  options.shard = shard;
  options.num_shards = shards;
  return options;
}

void PushTo(ChunkBarrier* c, int rank, int64_t step,
            const std::vector<float>& g, Reply* reply) {
  const absl::string_view bytes = Bytes(g);
  c->Push(rank, step, WireDType::kFloat32,
          absl::Span<const absl::string_view>(&bytes, 1), absl::Now(),
          reply->Callback());
}

class StepBarriersTest : public ::testing::Test {
 protected:
  BarrierCounters counters_;
  Membership members_{2, /*server_incarnation=*/99};
  StepBarriers barriers_{Options(2), &counters_};
  StepBarriers::Revocation revoked_;
  const std::vector<float> initial_ = {1, 2, 3, 4, 5};
};

TEST(ShardStateBytesTest, WeightsSumCopyAndSlots) {
  EXPECT_EQ(ShardStateBytes(10, OptimizerConfig::Defaults("sgd")), 120);
  EXPECT_EQ(ShardStateBytes(10, OptimizerConfig::Defaults("momentum")), 160);
  EXPECT_EQ(ShardStateBytes(10, OptimizerConfig::Defaults("adam")), 200);
  EXPECT_EQ(
      ShardStateBytes(10, OptimizerConfig::Defaults(OptimizerConfig::kAverage)),
      120);
}

TEST_F(StepBarriersTest, TheSummationModeIsSyncWithoutBackups) {
  ModelSignature s = SmallSignature(2);
  s.optimizer = OptimizerConfig::Defaults(OptimizerConfig::kAverage);
  for (auto [mode, backups] :
       {std::pair{SyncMode::kAsync, 0}, std::pair{SyncMode::kSsp, 0},
        std::pair{SyncMode::kSync, 1}}) {
    s.sync.mode = mode;
    s.sync.backup_workers = backups;
    absl::StatusOr<Registration> r =
        barriers_.Register(0, s, &members_, &revoked_);
    EXPECT_EQ(r.status().code(), absl::StatusCode::kInvalidArgument);
    EXPECT_THAT(std::string(r.status().message()),
                StartsWith("the summation mode (optimizer \"average\") runs "
                           "in sync mode without backup workers"));
    EXPECT_EQ(barriers_.layout(), nullptr);
  }
  s.sync = SyncPolicy{};
  absl::StatusOr<Registration> r =
      barriers_.Register(0, s, &members_, &revoked_);
  ASSERT_TRUE(r.ok()) << r.status();
  EXPECT_TRUE(r->must_initialize);
}

TEST_F(StepBarriersTest, NothingBeforeASignature) {
  EXPECT_EQ(barriers_.layout(), nullptr);
  EXPECT_EQ(StepBarriers::Version(nullptr), -1);
  absl::StatusOr<ChunkBarrier*> none = barriers_.Owned(nullptr, 0);
  EXPECT_EQ(none.status().code(), absl::StatusCode::kInvalidArgument);
  EXPECT_EQ(none.status().message(), "chunk 0 is outside [0, 0)");
  StepBarriers::View view = barriers_.Current();
  EXPECT_FALSE(view.signature.has_value());
  EXPECT_EQ(view.version, -1);
  EXPECT_TRUE(view.owned.empty());
  EXPECT_EQ(barriers_.step_limit(), std::numeric_limits<int64_t>::max());
  EXPECT_FALSE(barriers_.shutting_down());
}

TEST_F(StepBarriersTest, RegisterAdoptsTheSignatureAndAdmitsTheRank) {
  absl::StatusOr<Registration> r0 =
      barriers_.Register(0, SmallSignature(2), &members_, &revoked_);
  ASSERT_TRUE(r0.ok()) << r0.status();
  EXPECT_TRUE(r0->must_initialize);
  EXPECT_EQ(r0->version, -1);
  EXPECT_EQ(r0->server_incarnation, 99);
  EXPECT_TRUE(members_.Check(0, r0->incarnation).ok());
  EXPECT_TRUE(revoked_.barriers.empty());
  const StepBarriers::Layout* layout = barriers_.layout();
  ASSERT_NE(layout, nullptr);
  ASSERT_EQ(layout->owned.size(), 1u);
  EXPECT_EQ(layout->owned[0]->chunk().size, 5);
  absl::StatusOr<ChunkBarrier*> owned = barriers_.Owned(layout, 0);
  ASSERT_TRUE(owned.ok());
  EXPECT_EQ(*owned, layout->owned[0]);
  EXPECT_EQ(barriers_.Owned(layout, 1).status().message(),
            "chunk 1 is outside [0, 1)");

  ASSERT_TRUE(layout->owned[0]->Initialize(Bytes(initial_)).ok());
  EXPECT_EQ(StepBarriers::Version(layout), 0);
  absl::StatusOr<Registration> r1 =
      barriers_.Register(1, SmallSignature(2), &members_, &revoked_);
  ASSERT_TRUE(r1.ok());
  EXPECT_FALSE(r1->must_initialize);
  EXPECT_EQ(r1->version, 0);
  EXPECT_EQ(barriers_.layout(), layout) << "the same signature: no new layout";
  EXPECT_EQ(barriers_.Current().version, 0);
}

TEST_F(StepBarriersTest, RefusesCallersOfAnotherLayout) {
  absl::Status rank =
      barriers_.Register(2, SmallSignature(2), &members_, &revoked_).status();
  EXPECT_EQ(rank.code(), absl::StatusCode::kInvalidArgument);
  EXPECT_EQ(rank.message(), "rank 2 is outside [0, 2) for this job");
  absl::Status workers =
      barriers_.Register(0, SmallSignature(3), &members_, &revoked_).status();
  EXPECT_EQ(workers.code(), absl::StatusCode::kFailedPrecondition);
  EXPECT_EQ(workers.message(),
            "model signature differs from the job's: num_workers: server has "
            "2, worker says 3");
  EXPECT_EQ(barriers_.layout(), nullptr);
}

TEST_F(StepBarriersTest, RankZeroOverrulesAProvisionalSignature) {
  ModelSignature provisional = SmallSignature(2);
  provisional.optimizer.learning_rate = 0.25;
  absl::StatusOr<Registration> r1 =
      barriers_.Register(1, provisional, &members_, &revoked_);
  ASSERT_TRUE(r1.ok());
  const StepBarriers::Layout* first = barriers_.layout();
  ASSERT_NE(first, nullptr);
  absl::StatusOr<Registration> r0 =
      barriers_.Register(0, SmallSignature(2), &members_, &revoked_);
  ASSERT_TRUE(r0.ok()) << r0.status();
  EXPECT_THAT(revoked_.barriers, ElementsAre(first->owned[0]));
  EXPECT_THAT(revoked_.reason,
              StartsWith("model signature differs from rank 0's: "));
  EXPECT_NE(barriers_.layout(), first);
  absl::Status gone = members_.Check(1, r1->incarnation);
  EXPECT_EQ(gone.code(), absl::StatusCode::kFailedPrecondition);
  EXPECT_EQ(gone.message(), revoked_.reason);
  EXPECT_TRUE(members_.Check(0, r0->incarnation).ok());
  absl::Status again =
      barriers_.Register(1, provisional, &members_, &revoked_).status();
  EXPECT_EQ(again.code(), absl::StatusCode::kFailedPrecondition);
  EXPECT_THAT(std::string(again.message()),
              StartsWith("model signature differs from the job's: "));
}

TEST_F(StepBarriersTest, ChunksOfOtherShardsAreNamed) {
  StepBarriers shard1(Options(1, /*shard=*/1, /*shards=*/2), &counters_);
  Membership one(1, 1);
  ModelSignature s = SmallSignature(1, /*chunk_bytes=*/8);
  s.num_shards = 2;
  ASSERT_TRUE(shard1.Register(0, s, &one, &revoked_).ok());
  const StepBarriers::Layout* layout = shard1.layout();
  ASSERT_NE(layout, nullptr);
  int others = 0;
  for (int c = 0; c < layout->plan.num_chunks(); ++c) {
    const int owner = layout->plan.chunks()[c].shard;
    absl::StatusOr<ChunkBarrier*> b = shard1.Owned(layout, c);
    if (owner == 1) {
      EXPECT_TRUE(b.ok());
      continue;
    }
    ++others;
    EXPECT_EQ(b.status().message(),
              absl::StrCat("chunk ", c, " belongs to shard ", owner,
                           ", not to this shard 1"));
  }
  EXPECT_GT(others, 0);
  EXPECT_EQ(static_cast<int>(layout->owned.size()) + others,
            layout->plan.num_chunks());
}

TEST_F(StepBarriersTest, RefusesAModelLargerThanTheBound) {
  ParameterServerOptions options = Options(2);
  options.max_state_bytes = 59;  // 5 values of sgd need 5 * 4 * 3 = 60.
  StepBarriers bounded(options, &counters_);
  absl::Status big =
      bounded.Register(0, SmallSignature(2), &members_, &revoked_).status();
  EXPECT_EQ(big.code(), absl::StatusCode::kResourceExhausted);
  EXPECT_EQ(bounded.layout(), nullptr);
}

TEST_F(StepBarriersTest, RestoresACheckpointAndDrainsAtItsVersion) {
  ShardCheckpoint checkpoint;
  checkpoint.signature = SmallSignature(2);
  checkpoint.num_workers = 2;
  checkpoint.version = 3;
  checkpoint.chunks.push_back(ChunkState{0, 3, initial_, {}});
  ShardCheckpoint other_layout = checkpoint;
  other_layout.num_shards = 2;
  absl::Status wrong = barriers_.Restore(other_layout);
  EXPECT_EQ(wrong.code(), absl::StatusCode::kFailedPrecondition);
  EXPECT_EQ(wrong.message(),
            "the checkpoint is of shard 0 of 2 with 2 workers; this server is "
            "shard 0 of 1 with 2 workers");
  ASSERT_TRUE(barriers_.Restore(checkpoint).ok());
  EXPECT_EQ(barriers_.Current().version, 3);
  EXPECT_EQ(barriers_.Restore(checkpoint).message(),
            "a checkpoint is restored only before any worker registers");

  barriers_.StopNewSteps();
  EXPECT_EQ(barriers_.step_limit(), 3) << "sync: the step after version 3";
  absl::Status draining =
      barriers_.Register(0, SmallSignature(2), &members_, &revoked_).status();
  EXPECT_EQ(draining.code(), absl::StatusCode::kUnavailable);
  EXPECT_EQ(draining.message(),
            "the server is draining: it takes no new steps");
}

TEST_F(StepBarriersTest, AsynchronousDrainsTakeNoStep) {
  ModelSignature s = SmallSignature(2);
  s.sync.mode = SyncMode::kAsync;
  ASSERT_TRUE(barriers_.Register(0, s, &members_, &revoked_).ok());
  barriers_.StopNewSteps();
  EXPECT_EQ(barriers_.step_limit(), 0);
}

TEST_F(StepBarriersTest, ExpireGatheringAnswersThePushesWaiting) {
  ASSERT_TRUE(
      barriers_.Register(0, SmallSignature(2), &members_, &revoked_).ok());
  ChunkBarrier* c = barriers_.layout()->owned[0];
  ASSERT_TRUE(c->Initialize(Bytes(initial_)).ok());
  Reply waiting;
  PushTo(c, 0, 0, {1, 1, 1, 1, 1}, &waiting);
  EXPECT_FALSE(waiting.result.has_value());
  barriers_.ExpireGathering(absl::AbortedError("re-forms"));
  ASSERT_TRUE(waiting.result.has_value());
  EXPECT_EQ(waiting.result->status(), absl::AbortedError("re-forms"));
  EXPECT_EQ(c->version(), 0) << "nothing applied";
}

TEST_F(StepBarriersTest, ShutdownClosesTheBarriersAndRegistrations) {
  ASSERT_TRUE(
      barriers_.Register(0, SmallSignature(2), &members_, &revoked_).ok());
  ChunkBarrier* c = barriers_.layout()->owned[0];
  Reply pull;
  c->Pull(0, /*exact=*/false, pull.Callback());  // Waits for version 0.
  EXPECT_FALSE(pull.result.has_value());
  barriers_.Shutdown(absl::UnavailableError("bye"));
  EXPECT_TRUE(barriers_.shutting_down());
  ASSERT_TRUE(pull.result.has_value());
  EXPECT_EQ(pull.result->status(), absl::UnavailableError("bye"));
  absl::Status late =
      barriers_.Register(1, SmallSignature(2), &members_, &revoked_).status();
  EXPECT_EQ(late.code(), absl::StatusCode::kUnavailable);
  EXPECT_EQ(late.message(), "server is shutting down");
}

}  // namespace
}  // namespace lockstep
