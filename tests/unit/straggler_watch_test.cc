// StragglerWatch over a real core of two workers on a clock the test moves
// (FakeEnv): the exact line when rank 1 is slow at two checks in a row,
// the line when it keeps up again, and silence once no rank pushes.
#include "server/daemon/straggler_watch.h"

#include <memory>
#include <string>
#include <vector>

#include "common/base/env.h"
#include "gmock/gmock.h"
#include "gtest/gtest.h"
#include "tests/unit/chunk_reply_test_util.h"
#include "tests/unit/daemon_test_util.h"

namespace lockstep {
namespace {

using ::testing::ElementsAre;

class StragglerWatchTest : public ::testing::Test {
 protected:
  void SetUp() override {
    auto r0 = core_->Register(0, SmallSignature(2));
    auto r1 = core_->Register(1, SmallSignature(2));
    ASSERT_TRUE(r0.ok() && r1.ok());
    inc_[0] = r0->incarnation;
    inc_[1] = r1->incarnation;
    ASSERT_TRUE(core_->Initialize(0, inc_[0], 0, Bytes(initial_)).ok());
  }

  // One synchronous step of 100 ms: rank 0 pushes at its start, rank 1
  // `late_ms` after it; rank 1 reports `late_ms` more compute than rank 0.
  void Step(int late_ms) {
    const StepReport r0{step_ - 1, 0, 10000, 0, 1000};
    const StepReport r1{step_ - 1, 0, 10000 + 1000 * late_ms, 0, 1000};
    core_->Push(0, inc_[0], step_, 0, WireDType::kFloat32, Bytes(gradient_),
                reply_.Callback(), PushSlot(0, 0, r0));
    clock_.Advance(absl::Milliseconds(late_ms));
    core_->Push(1, inc_[1], step_, 0, WireDType::kFloat32, Bytes(gradient_),
                reply_.Callback(), PushSlot(0, 0, r1));
    clock_.Advance(absl::Milliseconds(100 - late_ms));
    ++step_;
  }
  // Two checks, StragglerWatch::kEvery apart.
  void CheckTwice(StragglerWatch* watch) {
    watch->Check(clock_.Now());
    clock_.Advance(StragglerWatch::kEvery);
    watch->Check(clock_.Now());
  }

  FakeEnv clock_;
  std::unique_ptr<ParameterServer> core_ = TwoWorkerCore(&clock_);
  int64_t inc_[2] = {0, 0};
  int64_t step_ = 0;
  const std::vector<float> initial_ = {1, 2, 3, 4, 5};
  const std::vector<float> gradient_ = {2, 2, 2, 2, 2};
  Reply reply_;
  LogLines log_;
};

TEST_F(StragglerWatchTest, SaysOnceWhenARankIsSlowAndOnceWhenItKeepsUp) {
  StragglerWatch watch(0.2, core_.get(), log_.Log());
  for (int i = 0; i < 4; ++i) Step(30);
  CheckTwice(&watch);
  EXPECT_TRUE(log_.lines.empty()) << "3 steps: too few to judge";
  for (int i = 0; i < 6; ++i) Step(30);
  watch.Check(clock_.Now());
  EXPECT_TRUE(log_.lines.empty()) << "one check is not two in a row";
  clock_.Advance(StragglerWatch::kEvery);
  watch.Check(clock_.Now());
  CheckTwice(&watch);  // Still slow: said once.
  EXPECT_THAT(
      log_.lines,
      ElementsAre("straggler: rank 1 is 30.0 ms later to the barrier than the "
                  "others' median (+30% of a 100.0 ms step): compute, 30.0 ms "
                  "more than theirs (over its last 16 steps; lockstep_ctl "
                  "stragglers for all ranks)"));
  for (int i = 0; i < 17; ++i) Step(1);  // The whole window catches up.
  CheckTwice(&watch);
  ASSERT_EQ(log_.lines.size(), 2u);
  EXPECT_EQ(log_.lines[1], "straggler: rank 1 keeps up with the others again");
}

TEST_F(StragglerWatchTest, RanksThatStoppedPushingAreNeitherSlowNorKeepingUp) {
  StragglerWatch watch(0.2, core_.get(), log_.Log());
  for (int i = 0; i < 10; ++i) Step(30);
  CheckTwice(&watch);
  ASSERT_EQ(log_.lines.size(), 1u);
  clock_.Advance(absl::Seconds(3));  // Nobody pushes: nothing to judge.
  CheckTwice(&watch);
  CheckTwice(&watch);
  EXPECT_EQ(log_.lines.size(), 1u) << log_.lines.back();
  StragglerWatch off(0, core_.get(), log_.Log());
  for (int i = 0; i < 10; ++i) Step(30);
  CheckTwice(&off);
  EXPECT_EQ(log_.lines.size(), 1u) << "fraction 0: never";
}

}  // namespace
}  // namespace lockstep
