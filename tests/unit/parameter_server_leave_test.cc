// ParameterServer::Leave's notes: a rank that finished while a synchronous
// step still needs it (uneven data) ends the steps at once, with an error
// that names it; a stopped rank may be replaced; a failed one is kept as
// failed until a replacement registers.
#include <memory>
#include <string>
#include <utility>
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
using ::testing::IsEmpty;

const LeaveNote kFinished{LeaveReason::kFinished, ""};

class ParameterServerLeaveTest : public ::testing::Test {
 protected:
  // `workers` registered, version 0 = {1, 2, 3, 4, 5}.
  void SetUpJob(int workers, SyncMode mode = SyncMode::kSync,
                int backup_workers = 0) {
    auto ps = ParameterServer::Create({workers});
    ASSERT_TRUE(ps.ok());
    ps_ = std::move(*ps);
    ModelSignature signature = SmallSignature(workers);
    signature.sync.mode = mode;
    signature.sync.backup_workers = backup_workers;
    if (mode == SyncMode::kSsp) signature.sync.staleness = 1;
    for (int r = 0; r < workers; ++r) {
      auto registered = ps_->Register(r, signature);
      ASSERT_TRUE(registered.ok()) << registered.status();
      inc_.push_back(registered->incarnation);
    }
    ASSERT_TRUE(ps_->Initialize(0, inc_[0], 0, Bytes(initial_)).ok());
  }
  void Push(int rank, int64_t step, Reply* reply) {
    ps_->Push(rank, inc_[rank], step, 0, WireDType::kFloat32, Bytes(gradient_),
              reply->Callback());
  }

  std::unique_ptr<ParameterServer> ps_;
  std::vector<int64_t> inc_;
  const std::vector<float> initial_ = {1, 2, 3, 4, 5};
  const std::vector<float> gradient_ = {2, 2, 2, 2, 2};
};

TEST_F(ParameterServerLeaveTest, ARankThatFinishedEarlyEndsTheStepsAtOnce) {
  SetUpJob(2);
  Reply waiting;
  Push(0, 0, &waiting);
  ASSERT_FALSE(waiting.result.has_value());
  ASSERT_TRUE(ps_->Leave(1, inc_[1], kFinished).ok());
  ASSERT_TRUE(waiting.result.has_value()) << "still waiting for rank 1";
  EXPECT_EQ(waiting.result->status().code(),
            absl::StatusCode::kFailedPrecondition);
  EXPECT_THAT(std::string(waiting.result->status().message()),
              HasSubstr("rank 1 finished its training and left the job at "
                        "version 0"));
  EXPECT_THAT(std::string(waiting.result->status().message()),
              HasSubstr("different numbers of steps"));
  // Pushed again (a worker that retries), or the next step: refused alike.
  Reply again;
  Push(0, 0, &again);
  ASSERT_TRUE(again.result.has_value());
  EXPECT_EQ(again.result->status(), waiting.result->status());
  EXPECT_EQ(ps_->GetStatus().version, 0) << "no step was applied";
  EXPECT_THAT(ps_->FailedRanks(), IsEmpty());
}

TEST_F(ParameterServerLeaveTest, RanksThatRanTheSameStepsEndCleanly) {
  SetUpJob(2);
  Reply a, b;
  Push(0, 0, &a);
  Push(1, 0, &b);
  ASSERT_TRUE(a.ok() && b.ok());
  ASSERT_TRUE(ps_->Leave(0, inc_[0], kFinished).ok());
  // Rank 1 still reads the last version, and leaves.
  Reply pulled;
  ps_->Pull(1, inc_[1], 0, 1, false, pulled.Callback());
  ASSERT_TRUE(pulled.ok());
  EXPECT_EQ(pulled.version(), 1);
  ASSERT_TRUE(ps_->Leave(1, inc_[1], kFinished).ok());
  EXPECT_TRUE(ps_->WaitUntilDone(absl::ZeroDuration()));
  EXPECT_THAT(ps_->FailedRanks(), IsEmpty());
}

TEST_F(ParameterServerLeaveTest, AStoppedOrSilentRankMayBeReplaced) {
  for (const LeaveNote& note :
       {LeaveNote{LeaveReason::kStopped, ""}, LeaveNote{}}) {
    SetUpJob(2);
    Reply waiting;
    Push(0, 0, &waiting);
    ASSERT_TRUE(ps_->Leave(1, inc_[1], note).ok());
    EXPECT_FALSE(waiting.result.has_value())
        << "the step waits for rank 1's replacement";
    auto back = ps_->Register(1, SmallSignature(2));
    ASSERT_TRUE(back.ok());
    inc_[1] = back->incarnation;
    Reply replaced;
    Push(1, 0, &replaced);
    ASSERT_TRUE(waiting.ok() && replaced.ok());
    EXPECT_EQ(waiting.version(), 1);
    inc_.clear();
  }
}

TEST_F(ParameterServerLeaveTest, BackupWorkersCoverAsManyFinishedRanks) {
  SetUpJob(3, SyncMode::kSync, /*backup_workers=*/1);
  ASSERT_TRUE(ps_->Leave(2, inc_[2], kFinished).ok());
  Reply a, b;
  Push(0, 0, &a);
  Push(1, 0, &b);
  ASSERT_TRUE(a.ok() && b.ok()) << "two of three pushes make a step";
  Reply waiting;
  Push(0, 1, &waiting);
  ASSERT_TRUE(ps_->Leave(1, inc_[1], kFinished).ok());
  ASSERT_TRUE(waiting.result.has_value());
  EXPECT_EQ(waiting.result->status().code(),
            absl::StatusCode::kFailedPrecondition);
}

TEST_F(ParameterServerLeaveTest, AsynchronousModesWaitForNobody) {
  for (SyncMode mode : {SyncMode::kAsync, SyncMode::kSsp}) {
    SetUpJob(2, mode);
    ASSERT_TRUE(ps_->Leave(1, inc_[1], kFinished).ok());
    Reply alone;
    Push(0, 0, &alone);
    ASSERT_TRUE(alone.result.has_value());
    EXPECT_TRUE(alone.ok())
        << SyncModeName(mode) << ": " << alone.result->status();
    inc_.clear();
  }
}

TEST_F(ParameterServerLeaveTest, AFailedRankStaysFailedUntilReplaced) {
  SetUpJob(2);
  const std::string detail(5000, 'x');
  ASSERT_TRUE(
      ps_->Leave(1, inc_[1], LeaveNote{LeaveReason::kFailed, detail}).ok());
  std::vector<std::pair<int, LeaveNote>> failed = ps_->FailedRanks();
  ASSERT_EQ(failed.size(), 1u);
  EXPECT_EQ(failed[0].first, 1);
  EXPECT_EQ(failed[0].second.detail, detail.substr(0, kMaxLeaveDetailBytes));
  // A group leaving for its absent ranks does not overwrite what rank 1
  // said.
  ASSERT_TRUE(ps_->Leave(1, 0, kFinished).ok());
  EXPECT_EQ(ps_->FailedRanks().size(), 1u);
  auto back = ps_->Register(1, SmallSignature(2));
  ASSERT_TRUE(back.ok());
  EXPECT_THAT(ps_->FailedRanks(), IsEmpty());
}

}  // namespace
}  // namespace lockstep
