// ParameterServer's policies: the memory a model may take, the sync modes
// a signature may name, and SSP's stalled ranks.
#include "server/core/parameter_server.h"

#include <cstdlib>
#include <optional>
#include <string>
#include <vector>

#include "absl/strings/str_cat.h"
#include "absl/strings/string_view.h"
#include "common/base/env.h"
#include "gmock/gmock.h"
#include "gtest/gtest.h"
#include "tests/unit/chunk_reply_test_util.h"
#include "tests/unit/parameter_server_test_util.h"

namespace lockstep {
namespace {

using ::testing::ElementsAre;
using ::testing::HasSubstr;
using ::testing::Not;

// A model whose state would not fit is refused before anything is
// allocated: 5 values with SGD take 5 x 4 x 3 = 60 bytes, with Adam 100.
TEST(ParameterServerPolicyTest, AModelTooLargeForTheBudgetIsRefused) {
  EXPECT_EQ(ShardStateBytes(5, OptimizerConfig::Defaults("sgd")), 60);
  EXPECT_EQ(ShardStateBytes(5, OptimizerConfig::Defaults("momentum")), 80);
  EXPECT_EQ(ShardStateBytes(5, OptimizerConfig::Defaults("adam")), 100);
  ParameterServerOptions options{2};
  options.max_state_bytes = 80;
  auto ps = ParameterServer::Create(options);
  ASSERT_TRUE(ps.ok());
  ModelSignature adam = SmallSignature(2);
  adam.optimizer = OptimizerConfig::Defaults("adam");
  const auto refused = (*ps)->Register(0, adam);
  EXPECT_EQ(refused.status().code(), absl::StatusCode::kResourceExhausted);
  EXPECT_THAT(std::string(refused.status().message()),
              HasSubstr("more than the 0 MiB this server may use"));
  EXPECT_FALSE((*ps)->GetStatus().signature.has_value());
  EXPECT_TRUE((*ps)->Register(0, SmallSignature(2)).ok());  // SGD: 60.
}

TEST(ParameterServerPolicyTest, AnAllReduceSignatureIsRefused) {
  auto ps = ParameterServer::Create({2});
  ASSERT_TRUE(ps.ok());
  ModelSignature signature = SmallSignature(2);
  signature.sync.mode = SyncMode::kAllReduce;
  const auto r = (*ps)->Register(0, signature);
  EXPECT_EQ(r.status().code(), absl::StatusCode::kInvalidArgument);
  EXPECT_THAT(std::string(r.status().message()), HasSubstr("sync mode"));
}

// SSP: a rank that stops pushing holds the others back once they are
// --staleness steps ahead. Half the step timeout warns; the whole of it
// evicts the rank, as sync mode does, and the pushes held for it are
// answered (they were applied); it registers again and goes on from its
// own step. With --on_worker_loss=fail the held pushes are cancelled
// instead, ending the job.
TEST(ParameterServerSspTest, AStalledSlowestRankIsEvictedOrFailsTheJob) {
  for (const bool fail : {false, true}) {
    SCOPED_TRACE(fail ? "fail" : "wait");
    FakeEnv env;  // The held push's wait is timed on its clock.
    ParameterServerOptions options;
    options.num_workers = 2;
    options.env = &env;
    auto ps = ParameterServer::Create(options);
    ASSERT_TRUE(ps.ok());
    ModelSignature signature = SmallSignature(2);
    signature.sync.mode = SyncMode::kSsp;
    signature.sync.staleness = 1;
    auto r0 = (*ps)->Register(0, signature);
    auto r1 = (*ps)->Register(1, signature);
    ASSERT_TRUE(r0.ok() && r1.ok());
    const std::vector<float> w0 = {1, 2, 3, 4, 5}, g = {2, 2, 2, 2, 2};
    ASSERT_TRUE((*ps)->Initialize(0, r0->incarnation, 0, Bytes(w0)).ok());
    Reply step0, step1;
    (*ps)->Push(0, r0->incarnation, 0, 0, WireDType::kFloat32, Bytes(g),
                step0.Callback());
    ASSERT_TRUE(step0.result.has_value() && step0.result->ok());
    (*ps)->Push(0, r0->incarnation, 1, 0, WireDType::kFloat32, Bytes(g),
                step1.Callback());
    EXPECT_FALSE(step1.result.has_value()) << "held for rank 1's step 0";
    const absl::Time start = env.Now();
    const absl::Duration timeout = absl::Seconds(10);
    auto warn =
        (*ps)->CheckStepTimeout(start + absl::Seconds(6), timeout, fail);
    ASSERT_EQ(warn.size(), 1u);
    EXPECT_FALSE(warn[0].expired);
    EXPECT_EQ(warn[0].waited, absl::Seconds(6));
    EXPECT_TRUE(warn[0].ssp);
    EXPECT_EQ(warn[0].step, 0);
    EXPECT_THAT(warn[0].missing, ElementsAre(1));
    auto expired =
        (*ps)->CheckStepTimeout(start + absl::Seconds(11), timeout, fail);
    ASSERT_EQ(expired.size(), 1u);
    EXPECT_TRUE(expired[0].expired);
    EXPECT_EQ((*ps)->GetStatus().version, 2) << "both pushes were applied";
    if (fail) {
      ASSERT_TRUE(step1.result.has_value());
      EXPECT_EQ(step1.result->status().code(), absl::StatusCode::kCancelled);
      continue;
    }
    ASSERT_TRUE(step1.result.has_value() && step1.result->ok())
        << "released: rank 1 was evicted";
    EXPECT_TRUE(
        (*ps)->CheckStepTimeout(start + absl::Seconds(12), timeout).empty())
        << "nothing waits any more";
    Reply late;
    (*ps)->Push(1, r1->incarnation, 0, 0, WireDType::kFloat32, Bytes(g),
                late.Callback());
    ASSERT_TRUE(late.result.has_value());
    EXPECT_EQ(late.result->status(),
              absl::AbortedError("rank 1 was evicted: it did not push step 0 "
                                 "within the step timeout; register again"));
    Reply ahead;
    (*ps)->Push(0, r0->incarnation, 2, 0, WireDType::kFloat32, Bytes(g),
                ahead.Callback());
    ASSERT_TRUE(ahead.result.has_value() && ahead.result->ok())
        << "rank 0 goes on without rank 1";
    auto back = (*ps)->Register(1, signature);
    ASSERT_TRUE(back.ok());
    Reply slow;
    (*ps)->Push(1, back->incarnation, 0, 0, WireDType::kFloat32, Bytes(g),
                slow.Callback());
    ASSERT_TRUE(slow.result.has_value() && slow.result->ok());
    EXPECT_EQ((*ps)->GetStatus().version, 4) << "each push applied once";
  }
}

}  // namespace
}  // namespace lockstep
