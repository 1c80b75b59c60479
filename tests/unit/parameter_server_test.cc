#include "server/core/parameter_server.h"

#include <cstdlib>
#include <optional>
#include <string>
#include <vector>

#include "absl/strings/str_cat.h"
#include "absl/strings/string_view.h"
#include "gmock/gmock.h"
#include "gtest/gtest.h"
#include "tests/unit/chunk_reply_test_util.h"
#include "tests/unit/parameter_server_test_util.h"

namespace lockstep {
namespace {

using ::testing::ElementsAre;
using ::testing::HasSubstr;
using ::testing::Not;

class ParameterServerTest : public ::testing::Test {
 protected:
  // Two workers registered, version 0 = {1, 2, 3, 4, 5}.
  void SetUpJob(int64_t chunk_bytes = 1 << 20) {
    auto ps = ParameterServer::Create({/*num_workers=*/2});
    ASSERT_TRUE(ps.ok());
    ps_ = std::move(*ps);
    auto r0 = ps_->Register(0, SmallSignature(2, chunk_bytes));
    auto r1 = ps_->Register(1, SmallSignature(2, chunk_bytes));
    ASSERT_TRUE(r0.ok() && r1.ok());
    EXPECT_TRUE(r0->must_initialize);
    EXPECT_FALSE(r1->must_initialize);
    inc0_ = r0->incarnation;
    inc1_ = r1->incarnation;
    const int64_t per_chunk = chunk_bytes / 4;
    for (int64_t off = 0, c = 0; off < 5; off += per_chunk, ++c) {
      std::vector<float> part(initial_.begin() + off,
                              initial_.begin() + std::min<int64_t>(5, off + per_chunk));
      ASSERT_TRUE(ps_->Initialize(0, inc0_, c, Bytes(part)).ok());
    }
  }

  std::unique_ptr<ParameterServer> ps_;
  int64_t inc0_ = 0, inc1_ = 0;
  const std::vector<float> initial_ = {1, 2, 3, 4, 5};
};

TEST_F(ParameterServerTest, RejectsZeroWorkers) {
  EXPECT_EQ(ParameterServer::Create({0}).status().code(),
            absl::StatusCode::kInvalidArgument);
}

TEST_F(ParameterServerTest, BarrierAveragesAndAppliesOnce) {
  SetUpJob();
  EXPECT_EQ(ps_->GetStatus().version, 0);
  Reply a, b;
  const std::vector<float> g0 = {0.5f, -1.0f, 2.0f, 0.25f, 4.0f};
  const std::vector<float> g1 = {1.5f, 3.0f, -2.0f, 0.75f, 0.0f};
  ps_->Push(0, inc0_, 0, 0, WireDType::kFloat32, Bytes(g0), a.Callback());
  EXPECT_FALSE(a.result.has_value()) << "answered before the barrier closed";
  EXPECT_THAT(ps_->GetStatus().pushed_ranks, ElementsAre(0));
  ps_->Push(1, inc1_, 0, 0, WireDType::kFloat32, Bytes(g1), b.Callback());
  ASSERT_TRUE(a.result.has_value() && b.result.has_value());
  ASSERT_TRUE(a.result->ok());
  // w1 = w0 - 0.5 * (g0 + g1) / 2, by hand.
  EXPECT_THAT(*(*a.result)->values, ElementsAre(0.5f, 1.5f, 3.0f, 3.75f, 4.0f));
  EXPECT_EQ((*a.result)->version, 1);
  EXPECT_EQ((*b.result)->values, (*a.result)->values);
  EXPECT_EQ(ps_->GetStatus().version, 1);
  const ServerCounters c = ps_->GetStatus().counters;
  EXPECT_EQ(c.pushes_accepted, 2);
  EXPECT_EQ(c.pushes_refused, 0);
  EXPECT_EQ(c.chunk_steps, 1);
  EXPECT_EQ(c.bytes_received, 2 * 5 * 4);
}

// An all-reduce rank's reports (Coordinator.ReportSteps) fill its window
// while no model is registered; a PS job's pushes carry its reports, and
// the window counts their arrivals, so reports are refused there.
TEST_F(ParameterServerTest, StepReportsAreAnAllReduceJobsOnly) {
  auto ps = ParameterServer::Create({/*num_workers=*/2});
  ASSERT_TRUE(ps.ok());
  const std::vector<StepReport> one = {{0, 10, 20, 0, 30}};
  ASSERT_TRUE((*ps)->NoteStepReports(1, one).ok());
  EXPECT_EQ((*ps)->GetStatus().workers[1].window.reports, 1);
  EXPECT_EQ((*ps)->NoteStepReports(2, one).code(),
            absl::StatusCode::kInvalidArgument);
  SetUpJob();
  EXPECT_EQ(ps_->NoteStepReports(1, one).code(),
            absl::StatusCode::kFailedPrecondition);
  EXPECT_EQ(ps_->GetStatus().workers[1].window.reports, 0);
}

TEST_F(ParameterServerTest, DuplicatePushIsCountedOnce) {
  SetUpJob();
  Reply a, a_again, b;
  const std::vector<float> g0 = {4, 4, 4, 4, 4};
  const std::vector<float> g1 = {0, 0, 0, 0, 0};
  ps_->Push(0, inc0_, 0, 0, WireDType::kFloat32, Bytes(g0), a.Callback());
  ps_->Push(0, inc0_, 0, 0, WireDType::kFloat32, Bytes(g0), a_again.Callback());
  EXPECT_FALSE(a_again.result.has_value());
  ps_->Push(1, inc1_, 0, 0, WireDType::kFloat32, Bytes(g1), b.Callback());
  ASSERT_TRUE(a_again.result.has_value() && a_again.result->ok());
  // Counted twice it would be w - 0.5 * 8 / 2 = w - 2; once is w - 1.
  EXPECT_THAT(*(*a_again.result)->values, ElementsAre(0, 1, 2, 3, 4));
  // A re-sent push of the step just applied gets the same answer.
  Reply late;
  ps_->Push(1, inc1_, 0, 0, WireDType::kFloat32, Bytes(g1), late.Callback());
  ASSERT_TRUE(late.result.has_value() && late.result->ok());
  EXPECT_EQ((*late.result)->version, 1);
  EXPECT_EQ(*(*late.result)->values, *(*a.result)->values);
}

TEST_F(ParameterServerTest, BadPushesChangeNothing) {
  SetUpJob();
  const std::vector<float> good = {1, 1, 1, 1, 1};
  std::vector<float> nan = good;
  nan[3] = std::nanf("");
  std::vector<float> inf = good;
  inf[0] = 1.0f / 0.0f;
  const std::vector<float> short_grad = {1, 1, 1};
  struct Case {
    int rank;
    int64_t incarnation, step;
    int chunk;
    std::vector<float> grad;
    absl::StatusCode code;
    std::string words;
  };
  const std::vector<Case> cases = {
      {0, inc0_, 1, 0, good, absl::StatusCode::kFailedPrecondition, "step 1"},
      {0, inc0_, 0, 0, nan, absl::StatusCode::kInvalidArgument, "element 3"},
      {0, inc0_, 0, 0, inf, absl::StatusCode::kInvalidArgument, "not finite"},
      {0, inc0_, 0, 0, short_grad, absl::StatusCode::kInvalidArgument, "12 bytes"},
      {5, inc0_, 0, 0, good, absl::StatusCode::kFailedPrecondition, "rank 5"},
      {1, inc0_, 0, 0, good, absl::StatusCode::kPermissionDenied,
       "was not issued by this server"},
      {0, inc0_, 0, 7, good, absl::StatusCode::kInvalidArgument, "chunk 7"},
  };
  for (const Case& c : cases) {
    Reply r;
    ps_->Push(c.rank, c.incarnation, c.step, c.chunk, WireDType::kFloat32, Bytes(c.grad),
              r.Callback());
    ASSERT_TRUE(r.result.has_value()) << c.words;
    EXPECT_EQ(r.result->status().code(), c.code) << c.words;
    EXPECT_THAT(std::string(r.result->status().message()), HasSubstr(c.words));
  }
  // Nothing was counted: two good pushes give exactly w - 0.5 * 1.
  EXPECT_TRUE(ps_->GetStatus().pushed_ranks.empty());
  EXPECT_EQ(ps_->GetStatus().counters.pushes_refused,
            static_cast<int64_t>(cases.size()));
  EXPECT_EQ(ps_->GetStatus().counters.pushes_accepted, 0);
  Reply a, b;
  ps_->Push(0, inc0_, 0, 0, WireDType::kFloat32, Bytes(good), a.Callback());
  ps_->Push(1, inc1_, 0, 0, WireDType::kFloat32, Bytes(good), b.Callback());
  ASSERT_TRUE(b.result.has_value() && b.result->ok());
  EXPECT_THAT(*(*b.result)->values, ElementsAre(0.5f, 1.5f, 2.5f, 3.5f, 4.5f));
}

// An incarnation is what lets a push count for its rank: another worker
// must not be able to guess it from its own (it used to be a counter).
TEST_F(ParameterServerTest, IncarnationsAreNotGuessable) {
  SetUpJob();
  std::vector<int64_t> seen = {inc0_, inc1_};
  for (int i = 0; i < 6; ++i) {
    auto again = ps_->Register(i % 2, SmallSignature(2));
    ASSERT_TRUE(again.ok());
    seen.push_back(again->incarnation);
  }
  // A wrong guess must not be told the right one.
  const int64_t current1 = seen.back();
  Reply r;
  ps_->Pull(1, 12345, 0, 0, false, r.Callback());
  ASSERT_TRUE(r.result.has_value());
  // Not "replaced": nobody registered it.
  EXPECT_EQ(r.result->status().code(), absl::StatusCode::kPermissionDenied);
  EXPECT_THAT(std::string(r.result->status().message()),
              HasSubstr("was not issued by this server"));
  EXPECT_THAT(std::string(r.result->status().message()),
              Not(HasSubstr(absl::StrCat(current1))));
  const absl::Status left = ps_->Leave(1, 12345);
  EXPECT_EQ(left.code(), absl::StatusCode::kPermissionDenied);
  EXPECT_THAT(std::string(left.message()),
              Not(HasSubstr(absl::StrCat(current1))));
  for (size_t i = 0; i < seen.size(); ++i) {
    EXPECT_GT(seen[i], 0);
    for (size_t j = 0; j < i; ++j) {
      EXPECT_GT(std::abs(seen[i] - seen[j]), 1 << 20)
          << "incarnations " << seen[j] << " and " << seen[i];
    }
  }
}

TEST_F(ParameterServerTest, ReplacedIncarnationIsRefused) {
  SetUpJob();
  auto again = ps_->Register(1, SmallSignature(2));
  ASSERT_TRUE(again.ok());
  EXPECT_NE(again->incarnation, inc1_);
  EXPECT_GT(again->incarnation, 0);
  EXPECT_EQ(again->version, 0);
  Reply r;
  ps_->Push(1, inc1_, 0, 0, WireDType::kFloat32, Bytes(initial_), r.Callback());
  EXPECT_EQ(r.result->status().code(), absl::StatusCode::kAlreadyExists);
  EXPECT_THAT(std::string(r.result->status().message()),
              HasSubstr("was replaced: another worker registered as rank 1"));
}

TEST_F(ParameterServerTest, SignatureMismatchNamesTheDifference) {
  SetUpJob();
  ModelSignature other = SmallSignature(2);
  other.tensors[1].shape = {3};
  auto r = ps_->Register(1, other);
  EXPECT_EQ(r.status().code(), absl::StatusCode::kFailedPrecondition);
  EXPECT_THAT(std::string(r.status().message()), HasSubstr("dense_0/bias"));
  ModelSignature opt = SmallSignature(2);
  opt.optimizer = OptimizerConfig::Defaults("adam");
  r = ps_->Register(1, opt);
  EXPECT_THAT(std::string(r.status().message()), HasSubstr("optimizer"));
  EXPECT_EQ(ps_->Register(2, SmallSignature(2)).status().code(),
            absl::StatusCode::kInvalidArgument);
  EXPECT_THAT(std::string(ps_->Register(1, SmallSignature(3)).status().message()),
              HasSubstr("num_workers"));
}

TEST_F(ParameterServerTest, RankZeroDefinesTheModel) {
  auto ps = ParameterServer::Create({2});
  ASSERT_TRUE(ps.ok());
  ModelSignature other = SmallSignature(2);
  other.tensors[0].shape = {4};
  auto early = (*ps)->Register(1, other);
  ASSERT_TRUE(early.ok()) << "before rank 0, a signature is provisional";
  Reply waiting;
  (*ps)->Pull(1, early->incarnation, 0, 0, false, waiting.Callback());
  EXPECT_FALSE(waiting.result.has_value());
  auto r0 = (*ps)->Register(0, SmallSignature(2));
  ASSERT_TRUE(r0.ok());
  EXPECT_TRUE(r0->must_initialize);
  ASSERT_TRUE(waiting.result.has_value());
  EXPECT_EQ(waiting.result->status().code(),
            absl::StatusCode::kFailedPrecondition);
  EXPECT_THAT(std::string(waiting.result->status().message()),
              HasSubstr("differs from rank 0's: tensor 0"));
  // Calling again with the refused incarnation says the same.
  Reply again;
  (*ps)->Pull(1, early->incarnation, 0, 0, false, again.Callback());
  EXPECT_THAT(std::string(again.result->status().message()),
              HasSubstr("differs from rank 0's"));
  EXPECT_THAT((*ps)->GetStatus().registered_ranks, ElementsAre(0));
  // Once rank 0 has spoken, a differing signature is refused at once.
  EXPECT_EQ((*ps)->Register(1, other).status().code(),
            absl::StatusCode::kFailedPrecondition);
  EXPECT_TRUE((*ps)->Register(1, SmallSignature(2)).ok());
}

TEST_F(ParameterServerTest, PullWaitsForInitialization) {
  auto ps = ParameterServer::Create({2});
  ASSERT_TRUE(ps.ok());
  auto r0 = (*ps)->Register(0, SmallSignature(2));
  ASSERT_TRUE(r0.ok());
  Reply pulled;
  (*ps)->Pull(0, 0, 0, 0, false, pulled.Callback());
  EXPECT_FALSE(pulled.result.has_value());
  Reply early;
  (*ps)->Push(0, r0->incarnation, 0, 0, WireDType::kFloat32, Bytes(initial_), early.Callback());
  EXPECT_EQ(early.result->status().code(),
            absl::StatusCode::kFailedPrecondition);
  EXPECT_EQ((*ps)->Initialize(1, r0->incarnation, 0, Bytes(initial_))
                .status()
                .code(),
            absl::StatusCode::kFailedPrecondition);
  ASSERT_EQ(*(*ps)->Initialize(0, r0->incarnation, 0, Bytes(initial_)), 0);
  ASSERT_TRUE(pulled.result.has_value() && pulled.result->ok());
  EXPECT_EQ(*(*pulled.result)->values, initial_);
  // Sent again (a lost answer): the same weights are no change; others are
  // refused.
  EXPECT_EQ(*(*ps)->Initialize(0, r0->incarnation, 0, Bytes(initial_)), 0);
  const std::vector<float> other = {1, 2, 3, 4, 6};
  EXPECT_EQ(
      (*ps)->Initialize(0, r0->incarnation, 0, Bytes(other)).status().code(),
      absl::StatusCode::kFailedPrecondition);
}

TEST_F(ParameterServerTest, ChunksCloseIndependentlyAndVersionFollowsTheLast) {
  SetUpJob(/*chunk_bytes=*/8);  // Chunks of 2, 2 and 1 values.
  ASSERT_EQ(ps_->GetStatus().num_chunks, 3);
  Reply pull;
  ps_->Pull(0, 0, 2, 1, false, pull.Callback());
  EXPECT_FALSE(pull.result.has_value());
  std::vector<Reply> replies(6);
  const std::vector<float> g2 = {2, 2}, g1 = {2};
  for (int rank : {0, 1}) {
    const int64_t inc = rank == 0 ? inc0_ : inc1_;
    ps_->Push(rank, inc, 0, 0, WireDType::kFloat32, Bytes(g2), replies[rank * 3].Callback());
    ps_->Push(rank, inc, 0, 1, WireDType::kFloat32, Bytes(g2), replies[rank * 3 + 1].Callback());
  }
  EXPECT_EQ(ps_->GetStatus().version, 0) << "chunk 2 is still gathering";
  EXPECT_TRUE(ps_->GetStatus().pushed_ranks.empty());
  ps_->Push(0, inc0_, 0, 2, WireDType::kFloat32, Bytes(g1), replies[2].Callback());
  EXPECT_THAT(ps_->GetStatus().pushed_ranks, ElementsAre(0));
  ps_->Push(1, inc1_, 0, 2, WireDType::kFloat32, Bytes(g1), replies[5].Callback());
  EXPECT_EQ(ps_->GetStatus().version, 1);
  ASSERT_TRUE(pull.result.has_value() && pull.result->ok());
  EXPECT_THAT(*(*pull.result)->values, ElementsAre(4.0f));
  EXPECT_THAT(*(*replies[1].result)->values, ElementsAre(2.0f, 3.0f));
}

// A drain in the middle of a step: chunk 0 has closed step 0, chunks 1 and
// 2 still gather it. StopNewSteps lets step 0 finish on them (so that the
// last checkpoint takes every chunk at version 1) and refuses step 1.
TEST_F(ParameterServerTest, DrainLetsTheStepUnderWayLineUpAndRefusesTheNext) {
  SetUpJob(/*chunk_bytes=*/8);  // Chunks of 2, 2 and 1 values.
  std::vector<Reply> replies(6);
  const std::vector<float> g2 = {2, 2}, g1 = {2};
  ps_->Push(0, inc0_, 0, 0, WireDType::kFloat32, Bytes(g2),
            replies[0].Callback());
  ps_->Push(1, inc1_, 0, 0, WireDType::kFloat32, Bytes(g2),
            replies[1].Callback());
  ps_->Push(0, inc0_, 0, 1, WireDType::kFloat32, Bytes(g2),
            replies[2].Callback());
  ASSERT_TRUE(replies[0].result.has_value()) << "chunk 0 closed step 0";

  ps_->StopNewSteps();
  EXPECT_EQ(ps_->Snapshot(absl::ZeroDuration()).status().code(),
            absl::StatusCode::kDeadlineExceeded)
      << "chunks at versions 0..1";
  Reply next;
  ps_->Push(0, inc0_, 1, 0, WireDType::kFloat32, Bytes(g2), next.Callback());
  ASSERT_TRUE(next.result.has_value());
  EXPECT_EQ(next.result->status().code(), absl::StatusCode::kUnavailable);

  ps_->Push(1, inc1_, 0, 1, WireDType::kFloat32, Bytes(g2),
            replies[3].Callback());
  ps_->Push(0, inc0_, 0, 2, WireDType::kFloat32, Bytes(g1),
            replies[4].Callback());
  ps_->Push(1, inc1_, 0, 2, WireDType::kFloat32, Bytes(g1),
            replies[5].Callback());
  for (const Reply& r : replies) {
    ASSERT_TRUE(r.result.has_value() && r.result->ok());
  }
  absl::StatusOr<ShardCheckpoint> last = ps_->Snapshot(absl::ZeroDuration());
  ASSERT_TRUE(last.ok()) << last.status();
  EXPECT_EQ(last->version, 1);
  std::vector<float> weights;
  for (const ChunkState& c : last->chunks) {
    weights.insert(weights.end(), c.weights.begin(), c.weights.end());
  }
  EXPECT_THAT(weights, ElementsAre(0.0f, 1.0f, 2.0f, 3.0f, 4.0f));
}

TEST_F(ParameterServerTest, ShardOwnsOnlyItsChunks) {
  // 5 parameters over 2 shards: chunks of ceil(5/2) = 3 and 2 values;
  // chunk 0 on shard 0, chunk 1 on shard 1.
  auto ps = ParameterServer::Create({/*num_workers=*/1, /*shard=*/1,
                                     /*num_shards=*/2});
  ASSERT_TRUE(ps.ok());
  ModelSignature sig = SmallSignature(1);
  EXPECT_THAT(std::string((*ps)->Register(0, sig).status().message()),
              HasSubstr("num_shards"));
  sig.num_shards = 2;
  auto reg = (*ps)->Register(0, sig);
  ASSERT_TRUE(reg.ok());
  EXPECT_EQ((*ps)->GetStatus().num_chunks, 1);
  const std::vector<float> foreign = {1, 2, 3}, own = {4, 5};
  auto refused = (*ps)->Initialize(0, reg->incarnation, 0, Bytes(foreign));
  EXPECT_EQ(refused.status().code(), absl::StatusCode::kInvalidArgument);
  EXPECT_THAT(std::string(refused.status().message()),
              HasSubstr("belongs to shard 0"));
  EXPECT_EQ(*(*ps)->Initialize(0, reg->incarnation, 1, Bytes(own)), 0)
      << "the shard's version is complete with its own chunk";
  Reply r;
  const std::vector<float> g = {2, 4};
  (*ps)->Push(0, reg->incarnation, 0, 1, WireDType::kFloat32, Bytes(g), r.Callback());
  ASSERT_TRUE(r.result.has_value() && r.result->ok());
  EXPECT_THAT(*(*r.result)->values, ElementsAre(3.0f, 3.0f));
  EXPECT_FALSE(ParameterServer::Create({1, 2, 2}).ok());
}

TEST_F(ParameterServerTest, LeaveAndShutdown) {
  SetUpJob();
  Reply waiting;
  ps_->Push(0, inc0_, 0, 0, WireDType::kFloat32, Bytes(initial_), waiting.Callback());
  EXPECT_FALSE(ps_->WaitUntilDone(absl::ZeroDuration()));
  ASSERT_TRUE(ps_->Leave(0, inc0_).ok());
  EXPECT_EQ(ps_->Leave(1, inc0_).code(), absl::StatusCode::kPermissionDenied);
  ASSERT_TRUE(ps_->Leave(1, inc1_).ok());
  EXPECT_TRUE(ps_->WaitUntilDone(absl::Seconds(5)));
  EXPECT_THAT(ps_->GetStatus().finished_ranks, ElementsAre(0, 1));
  ps_->Shutdown();
  ASSERT_TRUE(waiting.result.has_value());
  EXPECT_EQ(waiting.result->status().code(), absl::StatusCode::kUnavailable);
  Reply after;
  ps_->Pull(0, 0, 0, 0, false, after.Callback());
  EXPECT_EQ(after.result->status().code(), absl::StatusCode::kUnavailable);
}

}  // namespace
}  // namespace lockstep
