// ParameterServer in an elastic job: pushes that carry a group generation
// and a batch shard (ParameterServer::Push, RequireGeneration).
#include <memory>
#include <vector>

#include "gmock/gmock.h"
#include "gtest/gtest.h"
#include "server/core/parameter_server.h"
#include "tests/unit/chunk_reply_test_util.h"
#include "tests/unit/parameter_server_test_util.h"

namespace lockstep {
namespace {

using ::testing::ElementsAre;
using ::testing::HasSubstr;

// Three shards a step; only ranks 0 and 1 registered (rank 2 is absent).
// Version 0 = {1, 2, 3, 4, 5}, SGD at 0.5.
class ElasticServerTest : public ::testing::Test {
 protected:
  void SetUp() override {
    auto ps = ParameterServer::Create({/*num_workers=*/3});
    ASSERT_TRUE(ps.ok());
    ps_ = std::move(*ps);
    auto r0 = ps_->Register(0, SmallSignature(3));
    auto r1 = ps_->Register(1, SmallSignature(3));
    ASSERT_TRUE(r0.ok() && r1.ok());
    inc0_ = r0->incarnation;
    inc1_ = r1->incarnation;
    ASSERT_TRUE(ps_->Initialize(0, inc0_, 0, Bytes(initial_)).ok());
  }

  // Rank `rank` pushes gradient `g` for `shard` of step 0 in `generation`.
  void Push(int rank, int shard, int64_t generation,
            const std::vector<float>& g, Reply* reply) {
    ps_->Push(rank, rank == 0 ? inc0_ : inc1_, 0, 0, WireDType::kFloat32,
              Bytes(g), reply->Callback(), PushSlot{generation, shard});
  }

  std::unique_ptr<ParameterServer> ps_;
  int64_t inc0_ = 0, inc1_ = 0;
  const std::vector<float> initial_ = {1, 2, 3, 4, 5};
  const std::vector<float> g0_ = {3, 0, 0, 0, 0};
  const std::vector<float> g1_ = {0, 3, 0, 0, 0};
  const std::vector<float> g2_ = {0, 0, 3, 3, 0};
};

TEST_F(ElasticServerTest, TheBarrierCountsShardsNotRanks) {
  ps_->RequireGeneration(1);
  Reply a, b, c;
  Push(0, 0, 1, g0_, &a);
  Push(0, 2, 1, g2_, &c);  // Rank 0 covers absent rank 2's shard.
  EXPECT_FALSE(a.result.has_value() || c.result.has_value());
  Push(1, 1, 1, g1_, &b);
  ASSERT_TRUE(a.ok() && b.ok() && c.ok());
  // w1 = w0 - 0.5 * (g0 + g1 + g2) / 3.
  EXPECT_THAT(a.values(), ElementsAre(0.5f, 1.5f, 2.5f, 3.5f, 5.0f));
  EXPECT_EQ(a.version(), 1);
  EXPECT_EQ(b.values(), a.values());
  EXPECT_EQ(c.values(), a.values());
}

TEST_F(ElasticServerTest, ASecondPushOfAShardIsCountedOnce) {
  ps_->RequireGeneration(1);
  Reply a, again, b, c;
  Push(0, 2, 1, g2_, &a);
  Push(1, 2, 1, g2_, &again);  // Two views of the group, one shard.
  Push(0, 0, 1, g0_, &c);
  EXPECT_FALSE(a.result.has_value());
  Push(1, 1, 1, g1_, &b);
  ASSERT_TRUE(a.ok() && again.ok() && b.ok() && c.ok());
  EXPECT_THAT(a.values(), ElementsAre(0.5f, 1.5f, 2.5f, 3.5f, 5.0f));
}

TEST_F(ElasticServerTest, AnOlderGenerationIsAbortedAndItsStepGivenUp) {
  ps_->RequireGeneration(1);
  Reply waiting;
  Push(0, 0, 1, g0_, &waiting);
  EXPECT_FALSE(waiting.result.has_value());
  ps_->RequireGeneration(2);  // A worker joins: the group re-forms.
  ASSERT_TRUE(waiting.result.has_value());
  EXPECT_EQ(waiting.result->status().code(), absl::StatusCode::kAborted);
  EXPECT_THAT(waiting.result->status().message(),
              HasSubstr("the worker group re-forms (generation 2)"));
  Reply stale;
  Push(1, 1, 1, g1_, &stale);
  ASSERT_TRUE(stale.result.has_value());
  EXPECT_EQ(stale.result->status().code(), absl::StatusCode::kAborted);
  // The given-up step's sum is forgotten: generation 2 sums from scratch.
  Reply a, b, c;
  Push(0, 0, 2, g0_, &a);
  Push(0, 2, 2, g2_, &c);
  Push(1, 1, 2, g1_, &b);
  ASSERT_TRUE(a.ok());
  EXPECT_THAT(a.values(), ElementsAre(0.5f, 1.5f, 2.5f, 3.5f, 5.0f));
  EXPECT_EQ(ps_->GetStatus().version, 1);
}

TEST_F(ElasticServerTest, OtherShardsGiveUpOlderStepsButRefuseNone) {
  // A shard other than the coordinator's learns of a group from pushes.
  Reply old_one;
  Push(0, 0, 2, g0_, &old_one);
  Reply newer;
  Push(1, 1, 3, g1_, &newer);
  ASSERT_TRUE(old_one.result.has_value());
  EXPECT_EQ(old_one.result->status().code(), absl::StatusCode::kAborted);
  EXPECT_FALSE(newer.result.has_value());
  // Generation 1 after 3 (a restarted coordinator numbers from 1 again)
  // is taken: this shard requires none.
  Reply a, c;
  Push(0, 0, 1, g0_, &a);
  Push(0, 2, 1, g2_, &c);
  ASSERT_TRUE(a.ok() && newer.ok());
  EXPECT_THAT(a.values(), ElementsAre(0.5f, 1.5f, 2.5f, 3.5f, 5.0f));
}

TEST_F(ElasticServerTest, AnUnregisteredPushChangesNoGeneration) {
  ps_->RequireGeneration(1);
  Reply forged;
  ps_->Push(2, 12345, 0, 0, WireDType::kFloat32, Bytes(g2_), forged.Callback(),
            PushSlot{9, 2});
  ASSERT_TRUE(forged.result.has_value());
  EXPECT_FALSE(forged.result->ok());
  Reply a, b, c;
  Push(0, 0, 1, g0_, &a);
  Push(0, 2, 1, g2_, &c);
  Push(1, 1, 1, g1_, &b);
  ASSERT_TRUE(a.ok() && b.ok() && c.ok()) << "generation 1 is still the one";
}

TEST_F(ElasticServerTest, ALeaverMakesOtherShardsGiveTheirStepUp) {
  Reply waiting;
  Push(0, 0, 1, g0_, &waiting);  // Seen from a push only: not the first.
  ASSERT_TRUE(ps_->Leave(1, inc1_).ok());
  ASSERT_TRUE(waiting.result.has_value());
  EXPECT_EQ(waiting.result->status().code(), absl::StatusCode::kAborted);
  EXPECT_THAT(waiting.result->status().message(),
              HasSubstr("rank 1 left the worker group"));
}

TEST_F(ElasticServerTest, AMemberLeavingRequiresTheNextGeneration) {
  ps_->RequireGeneration(3);
  Reply waiting;
  Push(0, 0, 3, g0_, &waiting);
  ASSERT_TRUE(ps_->Leave(1, inc1_).ok());
  ASSERT_TRUE(waiting.result.has_value());
  EXPECT_EQ(waiting.result->status().code(), absl::StatusCode::kAborted);
  EXPECT_THAT(waiting.result->status().message(), HasSubstr("generation 4"));
  // The group that finishes leaves for absent ranks, and again for one
  // that left already.
  EXPECT_TRUE(ps_->Leave(2, 0).ok());
  EXPECT_TRUE(ps_->Leave(1, 0).ok());
  EXPECT_THAT(ps_->GetStatus().finished_ranks, ElementsAre(1, 2));
}

TEST_F(ElasticServerTest, BadSlotsAreRefused) {
  Reply outside, negative;
  Push(0, 3, 1, g0_, &outside);
  ASSERT_TRUE(outside.result.has_value());
  EXPECT_EQ(outside.result->status().code(),
            absl::StatusCode::kInvalidArgument);
  EXPECT_THAT(outside.result->status().message(),
              HasSubstr("the shard must be in [0, 3)"));
  Push(0, 0, -1, g0_, &negative);
  ASSERT_TRUE(negative.result.has_value());
  EXPECT_EQ(negative.result->status().code(),
            absl::StatusCode::kInvalidArgument);
  EXPECT_EQ(ps_->GetStatus().counters.pushes_accepted, 0);
}

TEST(ElasticServerModeTest, OnlyPlainSyncModeTakesShards) {
  auto ps = ParameterServer::Create({/*num_workers=*/2});
  ASSERT_TRUE(ps.ok());
  ModelSignature signature = SmallSignature(2);
  signature.sync.mode = SyncMode::kAsync;
  auto r0 = (*ps)->Register(0, signature);
  ASSERT_TRUE(r0.ok());
  const std::vector<float> initial = {1, 2, 3, 4, 5};
  ASSERT_TRUE((*ps)->Initialize(0, r0->incarnation, 0, Bytes(initial)).ok());
  Reply reply;
  (*ps)->Push(0, r0->incarnation, 0, 0, WireDType::kFloat32, Bytes(initial),
              reply.Callback(), PushSlot{1, 1});
  ASSERT_TRUE(reply.result.has_value());
  EXPECT_EQ(reply.result->status().code(),
            absl::StatusCode::kFailedPrecondition);
  // The flag as the worker spells it (worker/app/exchange_flags.cc).
  EXPECT_EQ(reply.result->status().message(),
            "elastic pushes (a group generation) need the workers' --sync=ps "
            "without --backup_workers");
}

}  // namespace
}  // namespace lockstep
