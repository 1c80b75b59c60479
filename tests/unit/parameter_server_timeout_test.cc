// ParameterServer's step timeouts on a clock the test moves (FakeEnv): a
// step warns at half the timeout, expires at the whole of it and not a
// nanosecond before, and its missing ranks are evicted.
#include <memory>
#include <vector>

#include "absl/time/time.h"
#include "common/base/env.h"
#include "gmock/gmock.h"
#include "gtest/gtest.h"
#include "server/core/parameter_server.h"
#include "tests/unit/chunk_reply_test_util.h"
#include "tests/unit/parameter_server_test_util.h"

namespace lockstep {
namespace {

using ::testing::ElementsAre;
using ::testing::HasSubstr;

class StepTimeoutTest : public ::testing::Test {
 protected:
  // Two workers registered on env_'s clock, version 0 = {1, 2, 3, 4, 5}.
  void SetUp() override {
    ParameterServerOptions options;
    options.num_workers = 2;
    options.env = &env_;
    auto ps = ParameterServer::Create(options);
    ASSERT_TRUE(ps.ok());
    ps_ = std::move(*ps);
    auto r0 = ps_->Register(0, SmallSignature(2));
    auto r1 = ps_->Register(1, SmallSignature(2));
    ASSERT_TRUE(r0.ok() && r1.ok());
    inc0_ = r0->incarnation;
    inc1_ = r1->incarnation;
    ASSERT_TRUE(ps_->Initialize(0, inc0_, 0, Bytes(initial_)).ok());
  }

  FakeEnv env_;
  std::unique_ptr<ParameterServer> ps_;
  int64_t inc0_ = 0, inc1_ = 0;
  const std::vector<float> initial_ = {1, 2, 3, 4, 5};
  const std::vector<float> g0_ = {2, 2, 2, 2, 2}, g1_ = {4, 4, 4, 4, 4};
};

TEST_F(StepTimeoutTest, ExpiryIsDecidedByTheInjectedClock) {
  const absl::Duration timeout = absl::Seconds(10);
  Reply first;
  const absl::Time pushed = env_.Now();
  ps_->Push(0, inc0_, 0, 0, WireDType::kFloat32, Bytes(g0_), first.Callback());
  EXPECT_EQ(ps_->GetStatus().workers[0].last_contact, pushed);
  env_.Advance(timeout / 2 - absl::Nanoseconds(1));
  EXPECT_TRUE(ps_->CheckStepTimeout(env_.Now(), timeout).empty())
      << "a nanosecond short of half the timeout";
  env_.Advance(absl::Nanoseconds(1));
  auto warn = ps_->CheckStepTimeout(env_.Now(), timeout);
  ASSERT_EQ(warn.size(), 1u);
  EXPECT_FALSE(warn[0].expired);
  EXPECT_EQ(warn[0].waited, timeout / 2);
  env_.Advance(timeout / 2 - absl::Nanoseconds(1));
  EXPECT_TRUE(ps_->CheckStepTimeout(env_.Now(), timeout).empty())
      << "warned already, and a nanosecond short of the timeout";
  EXPECT_FALSE(first.result.has_value());
  env_.Advance(absl::Nanoseconds(1));
  auto expired = ps_->CheckStepTimeout(env_.Now(), timeout);
  ASSERT_EQ(expired.size(), 1u);
  EXPECT_TRUE(expired[0].expired);
  EXPECT_EQ(expired[0].waited, timeout);
  ASSERT_TRUE(first.result.has_value());
  EXPECT_EQ(first.result->status().code(), absl::StatusCode::kAborted);
  EXPECT_EQ(env_.slept(), absl::ZeroDuration()) << "nothing slept";
}

TEST_F(StepTimeoutTest, WarnsThenExpiresAndEvicts) {
  Reply first;
  ps_->Push(0, inc0_, 0, 0, WireDType::kFloat32, Bytes(g0_), first.Callback());
  const absl::Time start = env_.Now();
  const absl::Duration timeout = absl::Seconds(10);
  EXPECT_TRUE(ps_->CheckStepTimeout(start, timeout).empty());
  auto warn = ps_->CheckStepTimeout(start + absl::Seconds(6), timeout);
  ASSERT_EQ(warn.size(), 1u);
  EXPECT_FALSE(warn[0].expired);
  EXPECT_EQ(warn[0].step, 0);
  EXPECT_EQ(warn[0].waited, absl::Seconds(6));
  EXPECT_THAT(warn[0].missing, ElementsAre(1));
  EXPECT_TRUE(ps_->CheckStepTimeout(start + absl::Seconds(7), timeout).empty())
      << "warned once per step";
  auto expired = ps_->CheckStepTimeout(start + absl::Seconds(11), timeout);
  ASSERT_EQ(expired.size(), 1u);
  EXPECT_TRUE(expired[0].expired);
  ASSERT_TRUE(first.result.has_value());
  EXPECT_EQ(first.result->status().code(), absl::StatusCode::kAborted);
  EXPECT_THAT(std::string(first.result->status().message()),
              HasSubstr("rank(s) 1"));
  EXPECT_THAT(std::string(first.result->status().message()),
              HasSubstr("timed out after 11s"));
  EXPECT_EQ(ps_->GetStatus().version, 0) << "nothing was applied";
  // The missing rank was evicted; its late push is refused.
  Reply late;
  ps_->Push(1, inc1_, 0, 0, WireDType::kFloat32, Bytes(g1_), late.Callback());
  EXPECT_EQ(late.result->status().code(), absl::StatusCode::kAborted);
  EXPECT_THAT(std::string(late.result->status().message()),
              HasSubstr("evicted"));
  // Registered again, both push step 0; rank 0's first gradient is gone.
  auto again = ps_->Register(1, SmallSignature(2));
  ASSERT_TRUE(again.ok());
  EXPECT_EQ(again->version, 0);
  Reply a, b;
  ps_->Push(1, again->incarnation, 0, 0, WireDType::kFloat32, Bytes(g1_),
            b.Callback());
  ps_->Push(0, inc0_, 0, 0, WireDType::kFloat32, Bytes(g0_), a.Callback());
  ASSERT_TRUE(a.result.has_value() && a.result->ok());
  // w - 0.5 * (2 + 4) / 2.
  EXPECT_THAT(*(*a.result)->values, ElementsAre(-0.5f, 0.5f, 1.5f, 2.5f, 3.5f));
}

// Snapshot's wait for chunks to line up runs on the Env's sleeps: on a
// FakeEnv it gives up after the timeout's worth of them, at once.
TEST_F(StepTimeoutTest, SnapshotWaitsOnTheInjectedClock) {
  ParameterServerOptions options;
  options.num_workers = 2;
  options.env = &env_;
  auto ps = ParameterServer::Create(options);
  ASSERT_TRUE(ps.ok());
  // Two chunks of 4 and 1 values.
  auto r0 = (*ps)->Register(0, SmallSignature(2, /*chunk_bytes=*/16));
  auto r1 = (*ps)->Register(1, SmallSignature(2, /*chunk_bytes=*/16));
  ASSERT_TRUE(r0.ok() && r1.ok());
  const std::vector<float> w0 = {1, 2, 3, 4}, w1 = {5}, g = {1, 1, 1, 1};
  ASSERT_TRUE((*ps)->Initialize(0, r0->incarnation, 0, Bytes(w0)).ok());
  ASSERT_TRUE((*ps)->Initialize(0, r0->incarnation, 1, Bytes(w1)).ok());
  Reply a, b;
  (*ps)->Push(0, r0->incarnation, 0, 0, WireDType::kFloat32, Bytes(g),
              a.Callback());
  (*ps)->Push(1, r1->incarnation, 0, 0, WireDType::kFloat32, Bytes(g),
              b.Callback());
  ASSERT_TRUE(a.ok());  // Chunk 0 at version 1, chunk 1 still at 0.
  auto snapshot = (*ps)->Snapshot(absl::Seconds(2));
  EXPECT_EQ(snapshot.status().code(), absl::StatusCode::kDeadlineExceeded);
  EXPECT_EQ(env_.slept(), absl::Seconds(2));
}

}  // namespace
}  // namespace lockstep
