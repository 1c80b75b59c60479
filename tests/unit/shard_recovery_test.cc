// ShardRecovery alone, on a clock the test moves: a step warns once at
// half the timeout and expires at the whole of it, evicting the ranks it
// waited for (or cancelling the job); snapshots wait for lined-up chunks.
#include "server/core/shard_recovery.h"

#include <vector>

#include "absl/status/status.h"
#include "absl/time/time.h"
#include "common/base/env.h"
#include "gmock/gmock.h"
#include "gtest/gtest.h"
#include "tests/unit/chunk_reply_test_util.h"
#include "tests/unit/parameter_server_test_util.h"

namespace lockstep {
namespace {

using ::testing::ElementsAre;

class ShardRecoveryTest : public ::testing::Test {
 protected:
  static ParameterServerOptions Options(Env* env) {
    ParameterServerOptions options;
    options.num_workers = 2;
    options.env = env;
    return options;
  }

  // Both ranks registered; version 0 = initial_.
  void Start() {
    StepBarriers::Revocation revoked;
    auto r0 = barriers_.Register(0, SmallSignature(2), &members_, &revoked);
    auto r1 = barriers_.Register(1, SmallSignature(2), &members_, &revoked);
    ASSERT_TRUE(r0.ok() && r1.ok()) << r0.status() << r1.status();
    inc0_ = r0->incarnation;
    inc1_ = r1->incarnation;
    ASSERT_TRUE(chunk()->Initialize(Bytes(initial_)).ok());
  }
  ChunkBarrier* chunk() { return barriers_.layout()->owned[0]; }
  void Push(int rank, int64_t step, Reply* reply) {
    const absl::string_view bytes = Bytes(gradient_);
    chunk()->Push(rank, step, WireDType::kFloat32,
                  absl::Span<const absl::string_view>(&bytes, 1), env_.Now(),
                  reply->Callback());
  }

  FakeEnv env_;
  const ParameterServerOptions options_ = Options(&env_);
  BarrierCounters counters_;
  Membership members_{2, 5};
  StepBarriers barriers_{options_, &counters_};
  ShardRecovery recovery_{options_, &barriers_, &members_};
  int64_t inc0_ = 0, inc1_ = 0;
  const std::vector<float> initial_ = {1, 2, 3, 4, 5};
  const std::vector<float> gradient_ = {2, 2, 2, 2, 2};
};

TEST_F(ShardRecoveryTest, NothingToCheckBeforeAModel) {
  EXPECT_TRUE(
      recovery_.CheckStepTimeout(env_.Now(), absl::Seconds(1), false).empty());
  absl::StatusOr<ShardCheckpoint> none = recovery_.Snapshot(absl::Seconds(1));
  EXPECT_EQ(none.status(),
            absl::FailedPreconditionError(
                "nothing to checkpoint before version 0"));
}

TEST_F(ShardRecoveryTest, WarnsOnceThenExpiresAndEvicts) {
  Start();
  ASSERT_FALSE(HasFatalFailure());
  const absl::Duration timeout = absl::Seconds(10);
  Reply first;
  Push(0, 0, &first);
  env_.Advance(timeout / 2 - absl::Nanoseconds(1));
  EXPECT_TRUE(recovery_.CheckStepTimeout(env_.Now(), timeout, false).empty());
  env_.Advance(absl::Nanoseconds(1));
  std::vector<StepAlarm> warn =
      recovery_.CheckStepTimeout(env_.Now(), timeout, false);
  ASSERT_EQ(warn.size(), 1u);
  EXPECT_EQ(warn[0].step, 0);
  EXPECT_EQ(warn[0].waited, timeout / 2);
  EXPECT_THAT(warn[0].missing, ElementsAre(1));
  EXPECT_FALSE(warn[0].expired);
  EXPECT_FALSE(warn[0].ssp);
  EXPECT_TRUE(recovery_.CheckStepTimeout(env_.Now(), timeout, false).empty())
      << "said once";
  EXPECT_TRUE(members_.Check(1, inc1_).ok()) << "a warning evicts nobody";

  env_.Advance(timeout / 2);
  std::vector<StepAlarm> expired =
      recovery_.CheckStepTimeout(env_.Now(), timeout, false);
  ASSERT_EQ(expired.size(), 1u);
  EXPECT_TRUE(expired[0].expired);
  EXPECT_EQ(expired[0].waited, timeout);
  EXPECT_THAT(expired[0].missing, ElementsAre(1));
  ASSERT_TRUE(first.result.has_value());
  EXPECT_EQ(first.result->status(),
            absl::AbortedError(
                "step 0 timed out after 10s waiting for rank(s) 1; it was "
                "not applied: register again and push it again"));
  EXPECT_EQ(chunk()->version(), 0);
  EXPECT_EQ(members_.Check(1, inc1_),
            absl::AbortedError("rank 1 was evicted: it did not push step 0 "
                               "within the step timeout; register again"));
  EXPECT_TRUE(members_.Check(0, inc0_).ok());
  EXPECT_TRUE(recovery_.CheckStepTimeout(env_.Now(), timeout, false).empty())
      << "the step is gone";
}

TEST_F(ShardRecoveryTest, AFailedJobCancelsAndEvictsNobody) {
  Start();
  ASSERT_FALSE(HasFatalFailure());
  Reply first;
  Push(0, 0, &first);
  env_.Advance(absl::Seconds(4));
  std::vector<StepAlarm> expired =
      recovery_.CheckStepTimeout(env_.Now(), absl::Seconds(4), true);
  ASSERT_EQ(expired.size(), 1u);
  EXPECT_TRUE(expired[0].expired);
  ASSERT_TRUE(first.result.has_value());
  EXPECT_EQ(first.result->status(),
            absl::CancelledError(
                "the job failed: step 0 timed out waiting for rank(s) 1 (the "
                "job fails when a worker is lost)"));
  EXPECT_TRUE(members_.Check(1, inc1_).ok());
}

TEST_F(ShardRecoveryTest, SnapshotsTheShard) {
  Start();
  ASSERT_FALSE(HasFatalFailure());
  Reply r0, r1;
  Push(0, 0, &r0);
  Push(1, 0, &r1);
  ASSERT_TRUE(r0.ok() && r1.ok());
  absl::StatusOr<ShardCheckpoint> snap = recovery_.Snapshot(absl::Seconds(1));
  ASSERT_TRUE(snap.ok()) << snap.status();
  EXPECT_EQ(snap->version, 1);
  EXPECT_EQ(snap->shard, 0);
  EXPECT_EQ(snap->num_shards, 1);
  EXPECT_EQ(snap->num_workers, 2);
  EXPECT_EQ(DescribeDifference(snap->signature, SmallSignature(2)), "");
  ASSERT_EQ(snap->chunks.size(), 1u);
  EXPECT_EQ(snap->chunks[0].version, 1);
  // Mean gradient 2, learning rate 0.5: each weight less 1.
  EXPECT_THAT(snap->chunks[0].weights, ElementsAre(0, 1, 2, 3, 4));
  EXPECT_EQ(env_.slept(), absl::ZeroDuration()) << "lined up: no wait";
}

}  // namespace
}  // namespace lockstep
