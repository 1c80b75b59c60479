// Checkpoints every shard shares, and stepping back to them: chunks pin
// the multiples of checkpoint_every_steps as they are published, the
// Checkpointer saves those (not the version it finds on its tick), the
// store finds and sets aside checkpoints by version, and a shard steps
// back to an older one (ParameterServer::StepBack), with every rank
// registering again. Values are derived by hand: SGD at 0.5 with gradient
// 2 everywhere takes 1 off each weight per step.
#include <memory>
#include <optional>
#include <string>
#include <vector>

#include "absl/strings/str_cat.h"
#include "common/base/env.h"
#include "gmock/gmock.h"
#include "gtest/gtest.h"
#include "server/core/checkpoint.h"
#include "server/core/parameter_server.h"
#include "server/daemon/checkpointer.h"
#include "tests/unit/chunk_reply_test_util.h"
#include "tests/unit/daemon_test_util.h"
#include "tests/unit/parameter_server_test_util.h"

namespace lockstep {
namespace {

using ::testing::ElementsAre;
using ::testing::HasSubstr;
using ::testing::IsEmpty;
using ::testing::Not;

class ShardStepBackTest : public ::testing::Test {
 protected:
  // Two workers registered at version 0 = {1, 2, 3, 4, 5}, pinning every
  // `every` versions.
  void Start(int64_t every) {
    ParameterServerOptions options;
    options.num_workers = 2;
    options.checkpoint_every_steps = every;
    options.env = &clock_;
    auto ps = ParameterServer::Create(options);
    ASSERT_TRUE(ps.ok()) << ps.status();
    ps_ = *std::move(ps);
    RegisterBoth();
    ASSERT_TRUE(ps_->Initialize(0, inc0_, 0, Bytes(initial_)).ok());
  }
  void RegisterBoth() {
    auto r0 = ps_->Register(0, SmallSignature(2));
    auto r1 = ps_->Register(1, SmallSignature(2));
    ASSERT_TRUE(r0.ok() && r1.ok()) << r0.status() << r1.status();
    inc0_ = r0->incarnation;
    inc1_ = r1->incarnation;
  }
  // A store in a new folder keeping 3, and a Checkpointer over it saving
  // every `every` steps.
  void StartCheckpointer(int64_t every) {
    auto store = CheckpointStore::Create(NewTempDir(), 0, 1, /*keep=*/3);
    ASSERT_TRUE(store.ok()) << store.status();
    store_ = *std::move(store);
    Checkpointer::Options options;
    options.every_steps = every;
    checkpointer_ = std::make_unique<Checkpointer>(
        options, store_.get(), ps_.get(), nullptr, log_.Log());
  }
  // Both ranks push `step`; returns rank 0's reply.
  Reply Step(int64_t step) {
    Reply a, b;
    ps_->Push(0, inc0_, step, 0, WireDType::kFloat32, Bytes(gradient_),
              a.Callback());
    ps_->Push(1, inc1_, step, 0, WireDType::kFloat32, Bytes(gradient_),
              b.Callback());
    EXPECT_TRUE(a.ok() && b.ok());
    return a;
  }
  static std::vector<float> At(int64_t version) {
    const float v = static_cast<float>(version);
    return {1 - v, 2 - v, 3 - v, 4 - v, 5 - v};
  }
  // The shard's checkpoint of `version`, as this job writes it.
  static ShardCheckpoint CheckpointOf(int64_t version) {
    ShardCheckpoint c;
    c.signature = SmallSignature(2);
    c.num_workers = 2;
    c.version = version;
    ChunkState chunk;
    chunk.version = version;
    chunk.weights = At(version);
    c.chunks.push_back(chunk);
    return c;
  }

  FakeEnv clock_;
  std::unique_ptr<ParameterServer> ps_;
  std::unique_ptr<CheckpointStore> store_;
  LogLines log_;
  std::unique_ptr<Checkpointer> checkpointer_;  // After store_ and ps_.
  int64_t inc0_ = 0, inc1_ = 0;
  const std::vector<float> initial_ = At(0);
  const std::vector<float> gradient_ = {2, 2, 2, 2, 2};
};

TEST_F(ShardStepBackTest, ChunksPinTheMultiplesAndKeepTheOldestUntilTaken) {
  Start(/*every=*/2);
  EXPECT_FALSE(ps_->TakePinned().has_value()) << "version 0 is not pinned";
  Step(0);
  EXPECT_FALSE(ps_->TakePinned().has_value()) << "1 is no multiple of 2";
  Step(1);
  Step(2);
  Step(3);  // Version 4 comes while 2 is still pinned: skipped.
  EXPECT_EQ(ps_->GetStatus().version, 4);
  EXPECT_EQ(ps_->PinsSkipped(), 1);
  std::optional<ShardCheckpoint> pinned = ps_->TakePinned();
  ASSERT_TRUE(pinned.has_value());
  EXPECT_EQ(pinned->version, 2);
  ASSERT_EQ(pinned->chunks.size(), 1u);
  EXPECT_EQ(pinned->chunks[0].weights, At(2));
  EXPECT_FALSE(ps_->TakePinned().has_value()) << "handed over once";
  Step(4);
  Step(5);
  pinned = ps_->TakePinned();
  ASSERT_TRUE(pinned.has_value());
  EXPECT_EQ(pinned->version, 6);
  EXPECT_EQ(pinned->chunks[0].weights, At(6));
}

TEST_F(ShardStepBackTest, TheCheckpointerSavesThePinnedVersionNotTheNewest) {
  Start(/*every=*/2);
  ASSERT_NO_FATAL_FAILURE(StartCheckpointer(/*every=*/2));
  Step(0);
  Step(1);
  Step(2);  // At 3 now; 2 is pinned.
  checkpointer_->SaveIfDue(clock_.Now());
  EXPECT_THAT(store_->Versions(), ElementsAre(2));
  auto loaded = store_->Load(2);
  ASSERT_TRUE(loaded.ok()) << loaded.status();
  EXPECT_EQ(loaded->chunks[0].weights, At(2));
  checkpointer_->SaveIfDue(clock_.Now());  // 3 is not a multiple of 2.
  EXPECT_THAT(store_->Versions(), ElementsAre(2));
  EXPECT_EQ(store_->Load(3).status().code(), absl::StatusCode::kNotFound);
  Step(3);
  Step(4);  // 4 pinned, then skipped nothing: taken below.
  checkpointer_->SaveIfDue(clock_.Now());
  EXPECT_THAT(store_->Versions(), ElementsAre(2, 4));
  for (const std::string& line : log_.lines) {
    EXPECT_THAT(line, Not(HasSubstr("skipped")));
  }
}

TEST_F(ShardStepBackTest, AShardStepsBackAndEveryRankRegistersAgain) {
  Start(/*every=*/2);
  for (int64_t s = 0; s < 5; ++s) Step(s);
  const ShardCheckpoint two = CheckpointOf(2);
  // Seen at 6 by a stale request: the shard is at 5.
  absl::Status stale = ps_->StepBack(0, inc0_, /*from=*/6, two);
  EXPECT_EQ(stale.code(), absl::StatusCode::kAborted) << stale;
  EXPECT_EQ(ps_->GetStatus().version, 5);
  // A push waiting at the barrier when the shard steps back learns why.
  Reply waiting;
  ps_->Push(1, inc1_, 5, 0, WireDType::kFloat32, Bytes(gradient_),
            waiting.Callback());
  EXPECT_FALSE(waiting.result.has_value());
  ASSERT_TRUE(ps_->StepBack(0, inc0_, /*from=*/5, two).ok());
  ASSERT_TRUE(waiting.result.has_value());
  EXPECT_EQ(waiting.result->status().code(), absl::StatusCode::kAborted);
  EXPECT_THAT(waiting.result->status().message(),
              HasSubstr("stepped back from version 5 to 2"));
  EXPECT_EQ(ps_->GetStatus().version, 2);
  Reply old;
  ps_->Push(0, inc0_, 2, 0, WireDType::kFloat32, Bytes(gradient_),
            old.Callback());
  ASSERT_TRUE(old.result.has_value());
  EXPECT_EQ(old.result->status().code(), absl::StatusCode::kAborted)
      << "an incarnation from before the step back";
  EXPECT_EQ(ps_->StepBack(0, inc0_, 2, two).code(), absl::StatusCode::kAborted);
  RegisterBoth();
  Reply next = Step(2);
  EXPECT_EQ(next.version(), 3);
  EXPECT_EQ(next.values(), At(3));
}

// Two ranks that saw the shards at different moments ask for different
// versions: rank 0's step back to 2 sets checkpoint 4 aside, and rank 1's
// request for 4, now stale, is told to register again (ABORTED), not that
// the shard lacks 4 (FAILED_PRECONDITION, which ends a worker).
TEST_F(ShardStepBackTest, AStaleStepBackToASetAsideVersionIsAborted) {
  Start(/*every=*/2);
  ASSERT_NO_FATAL_FAILURE(StartCheckpointer(/*every=*/2));
  for (int64_t s = 0; s < 5; ++s) {
    Step(s);
    checkpointer_->SaveIfDue(clock_.Now());
  }
  ASSERT_THAT(store_->Versions(), ElementsAre(2, 4));
  ASSERT_EQ(ps_->GetStatus().version, 5);
  auto back = checkpointer_->StepBack(0, inc0_, /*from=*/5, /*to=*/2);
  ASSERT_TRUE(back.ok()) << back.status();
  EXPECT_THAT(store_->Versions(), ElementsAre(2));
  auto stale = checkpointer_->StepBack(1, inc1_, /*from=*/5, /*to=*/4);
  EXPECT_EQ(stale.status().code(), absl::StatusCode::kAborted)
      << stale.status();
  EXPECT_EQ(ps_->GetStatus().version, 2);
}

TEST_F(ShardStepBackTest, AStepBackIsRefusedForAnotherModelOrAnUnknownCaller) {
  Start(/*every=*/0);
  Step(0);
  Step(1);
  ShardCheckpoint other = CheckpointOf(1);
  other.signature.tensors[0].name = "other";
  const absl::Status refused = ps_->StepBack(0, inc0_, 2, other);
  EXPECT_EQ(refused.code(), absl::StatusCode::kFailedPrecondition);
  EXPECT_THAT(refused.message(), HasSubstr("holds another model"));
  EXPECT_EQ(ps_->GetStatus().version, 2);
  EXPECT_EQ(ps_->StepBack(0, /*incarnation=*/12345, 2, other).code(),
            absl::StatusCode::kPermissionDenied);
}

TEST(CheckpointStoreVersionsTest, ListsLoadsAndSetsAsideByVersion) {
  const std::string dir = NewTempDir();
  auto store = CheckpointStore::Create(dir, 0, 1, /*keep=*/5);
  ASSERT_TRUE(store.ok()) << store.status();
  EXPECT_THAT((*store)->Versions(), IsEmpty());
  for (int64_t v : {10, 20, 30}) {
    ASSERT_TRUE((*store)->Save(CheckpointAt(v)).ok());
  }
  EXPECT_THAT((*store)->Versions(), ElementsAre(10, 20, 30));
  auto twenty = (*store)->Load(20);
  ASSERT_TRUE(twenty.ok()) << twenty.status();
  EXPECT_EQ(twenty->chunks[0].weights, WeightsAt(20));
  EXPECT_EQ((*store)->Load(25).status().code(), absl::StatusCode::kNotFound);
  const std::string base = dir + "/shard-0-of-1/ckpt-0000000000";
  EXPECT_THAT(
      (*store)->SetAsideAfter(10),
      ElementsAre(base + "20.lsc.stepped-back", base + "30.lsc.stepped-back"));
  EXPECT_THAT((*store)->Versions(), ElementsAre(10));
  std::vector<std::string> notes;
  auto newest = (*store)->LoadNewest(&notes);
  ASSERT_TRUE(newest.ok() && newest->has_value());
  EXPECT_EQ((*newest)->version, 10);
}

}  // namespace
}  // namespace lockstep
