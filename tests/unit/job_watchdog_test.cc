// JobWatchdog over a real core of two workers on a clock the test moves
// (FakeEnv): step timeouts, a job no worker calls any more, and the job's
// end, with the exact exit codes and lines.
#include "server/daemon/job_watchdog.h"

#include <memory>
#include <string>
#include <utility>
#include <vector>

#include "absl/strings/str_cat.h"
#include "common/base/env.h"
#include "common/base/exit_codes.h"
#include "gmock/gmock.h"
#include "gtest/gtest.h"
#include "server/core/checkpoint.h"
#include "tests/unit/chunk_reply_test_util.h"
#include "tests/unit/daemon_test_util.h"

namespace lockstep {
namespace {

using ::testing::ElementsAre;
using ::testing::IsEmpty;
using ::testing::StartsWith;

class JobWatchdogTest : public ::testing::Test {
 protected:
  // Two workers registered, version 0 = {1, 2, 3, 4, 5}.
  void SetUp() override {
    auto r0 = core_->Register(0, SmallSignature(2));
    auto r1 = core_->Register(1, SmallSignature(2));
    ASSERT_TRUE(r0.ok() && r1.ok());
    inc0_ = r0->incarnation;
    inc1_ = r1->incarnation;
    ASSERT_TRUE(core_->Initialize(0, inc0_, 0, Bytes(initial_)).ok());
  }

  JobWatchdog Make(const JobWatchdog::Options& options,
                   Checkpointer* checkpointer = nullptr,
                   WeightsFileWriter* weights = nullptr) {
    return JobWatchdog(options, core_.get(), checkpointer, weights, log_.Log());
  }
  // Rank 0 pushes step 0; rank 1 does not.
  void PushRankZero() {
    core_->Push(0, inc0_, 0, 0, WireDType::kFloat32, Bytes(gradient_),
                reply_.Callback());
  }
  void BothLeave() {
    ASSERT_TRUE(core_->Leave(0, inc0_).ok());
    ASSERT_TRUE(core_->Leave(1, inc1_).ok());
  }

  FakeEnv clock_;
  std::unique_ptr<ParameterServer> core_ = TwoWorkerCore(&clock_);
  int64_t inc0_ = 0, inc1_ = 0;
  const std::vector<float> initial_ = {1, 2, 3, 4, 5};
  const std::vector<float> gradient_ = {2, 2, 2, 2, 2};
  Reply reply_;
  LogLines log_;
};

TEST_F(JobWatchdogTest, NothingEndsAJobInProgress) {
  JobWatchdog::Options options;
  options.step_timeout = absl::Seconds(10);
  options.no_worker_timeout = absl::Seconds(60);
  JobWatchdog watchdog = Make(options);
  EXPECT_EQ(watchdog.CheckStepTimeouts(clock_.Now()), std::nullopt);
  EXPECT_EQ(watchdog.CheckWorkersGone(clock_.Now()), std::nullopt);
  EXPECT_EQ(watchdog.FinishIfDone(), std::nullopt);
  EXPECT_THAT(log_.lines, IsEmpty());
}

TEST_F(JobWatchdogTest, ALateStepWarnsThenWaitsForAReplacement) {
  JobWatchdog::Options options;
  options.step_timeout = absl::Seconds(10);
  JobWatchdog watchdog = Make(options);
  const absl::Time pushed = clock_.Now();
  PushRankZero();
  EXPECT_EQ(watchdog.CheckStepTimeouts(pushed + absl::Seconds(5)),
            std::nullopt);
  EXPECT_EQ(watchdog.CheckStepTimeouts(pushed + absl::Seconds(10)),
            std::nullopt);
  EXPECT_THAT(log_.lines,
              ElementsAre("warning: step 0 has waited 5s for rank(s) 1",
                          "step 0 timed out waiting for rank(s) 1; not "
                          "applied; waiting for a replacement"));
  ASSERT_TRUE(reply_.result.has_value());
  EXPECT_EQ(reply_.result->status().code(), absl::StatusCode::kAborted);
}

TEST_F(JobWatchdogTest, ALostWorkerFailsTheJobWhenAsked) {
  JobWatchdog::Options options;
  options.step_timeout = absl::Seconds(10);
  options.fail_on_worker_loss = true;
  JobWatchdog watchdog = Make(options);
  const absl::Time pushed = clock_.Now();
  PushRankZero();
  EXPECT_EQ(watchdog.CheckStepTimeouts(pushed + absl::Seconds(10)),
            kExitRetryable);
  EXPECT_THAT(log_.lines,
              ElementsAre("step 0 timed out waiting for rank(s) 1; not "
                          "applied; failing the job (--on_worker_loss=fail)"));
  ASSERT_TRUE(reply_.result.has_value());
  EXPECT_EQ(reply_.result->status().code(), absl::StatusCode::kCancelled);
}

TEST_F(JobWatchdogTest, NoStepTimeoutNeverWarns) {
  JobWatchdog watchdog = Make({});
  PushRankZero();
  EXPECT_EQ(watchdog.CheckStepTimeouts(clock_.Now() + absl::Hours(10)),
            std::nullopt);
  EXPECT_THAT(log_.lines, IsEmpty());
}

TEST_F(JobWatchdogTest, AJobNoWorkerCallsIsGivenUpAfterSavingIt) {
  auto store = CheckpointStore::Create(NewTempDir(), 0, 1, 3, Env::Default());
  ASSERT_TRUE(store.ok()) << store.status();
  Checkpointer checkpointer({}, store->get(), core_.get(), nullptr, log_.Log());
  JobWatchdog::Options options;
  options.no_worker_timeout = absl::Seconds(60);
  JobWatchdog watchdog = Make(options, &checkpointer);
  const absl::Time last = clock_.Now();  // Rank 0's Initialize.
  EXPECT_EQ(watchdog.CheckWorkersGone(last + absl::Seconds(59)), std::nullopt);
  EXPECT_EQ(watchdog.CheckWorkersGone(last + absl::Seconds(60)),
            kExitRetryable);
  ASSERT_EQ(log_.lines.size(), 2u);
  EXPECT_EQ(log_.lines[0],
            "no worker has called for 1m (--no_worker_timeout_s) and the job "
            "is unfinished: every worker was lost and none replaced; exiting "
            "retryable");
  EXPECT_THAT(log_.lines[1], StartsWith("checkpoint of version 0 in "));
  EXPECT_EQ(checkpointer.last_saved_version(), 0);
  PushRankZero();
  ASSERT_TRUE(reply_.result.has_value());
  EXPECT_EQ(reply_.result->status().code(), absl::StatusCode::kUnavailable);
}

TEST_F(JobWatchdogTest, BeforeAnyCallTheJobHasNotBegun) {
  FakeEnv clock;
  std::unique_ptr<ParameterServer> waiting = TwoWorkerCore(&clock);
  JobWatchdog::Options options;
  options.no_worker_timeout = absl::Seconds(60);
  JobWatchdog watchdog(options, waiting.get(), nullptr, nullptr, log_.Log());
  EXPECT_EQ(watchdog.CheckWorkersGone(clock.Now() + absl::Hours(10)),
            std::nullopt);
  EXPECT_THAT(log_.lines, IsEmpty());
}

// A shard that owns no chunk of the model (5 values over 4 shards: three
// chunks of 2, 2 and 1, none for shard 3) hears from workers only when they
// register and leave: its quiet is not a lost job. Before, it exited 75
// after --no_worker_timeout_s while the job trained on the other shards.
TEST_F(JobWatchdogTest, AShardThatOwnsNoChunkDoesNotGiveUpOnItsQuietWorkers) {
  FakeEnv clock;
  ParameterServerOptions shard;
  shard.num_workers = 2;
  shard.shard = 3;
  shard.num_shards = 4;
  shard.env = &clock;
  absl::StatusOr<std::unique_ptr<ParameterServer>> empty =
      ParameterServer::Create(shard);
  ASSERT_TRUE(empty.ok()) << empty.status();
  ModelSignature signature = SmallSignature(2);
  signature.num_shards = 4;
  ASSERT_TRUE((*empty)->Register(0, signature).ok());
  EXPECT_TRUE((*empty)->GetStatus().OwnsNoChunk());
  EXPECT_FALSE(core_->GetStatus().OwnsNoChunk());
  JobWatchdog::Options options;
  options.no_worker_timeout = absl::Seconds(60);
  JobWatchdog watchdog(options, empty->get(), nullptr, nullptr, log_.Log());
  EXPECT_EQ(watchdog.CheckWorkersGone(clock.Now() + absl::Hours(10)),
            std::nullopt);
  EXPECT_THAT(log_.lines, IsEmpty());
}

// An all-reduce job's ranks call only the coordinator: its calls start the
// job and count as contact as the core's do.
TEST_F(JobWatchdogTest, CoordinatorCallsAreWorkerContact) {
  FakeEnv clock;
  std::unique_ptr<ParameterServer> allreduce = TwoWorkerCore(&clock);
  ContactClock coordinator;
  JobWatchdog::Options options;
  options.no_worker_timeout = absl::Seconds(60);
  JobWatchdog watchdog(options, allreduce.get(), nullptr, nullptr, log_.Log(),
                       &coordinator);
  const absl::Time joined = clock.Now() + absl::Seconds(5);
  coordinator.Note(joined);
  EXPECT_EQ(watchdog.CheckWorkersGone(joined + absl::Seconds(59)),
            std::nullopt);
  coordinator.Note(joined + absl::Seconds(30));  // A later call.
  EXPECT_EQ(watchdog.CheckWorkersGone(joined + absl::Seconds(89)),
            std::nullopt);
  EXPECT_THAT(log_.lines, IsEmpty());
  EXPECT_EQ(watchdog.CheckWorkersGone(joined + absl::Seconds(90)),
            kExitRetryable);
  ASSERT_EQ(log_.lines.size(), 1u);
  EXPECT_EQ(log_.lines[0],
            "no worker has called for 1m (--no_worker_timeout_s) and the job "
            "is unfinished: every worker was lost and none replaced; exiting "
            "retryable");
}

TEST_F(JobWatchdogTest, TheJobEndsOnceEveryWorkerHasLeftWithTheModelSaved) {
  const std::string dir = NewTempDir();
  auto store = CheckpointStore::Create(dir, 0, 1, 3, Env::Default());
  ASSERT_TRUE(store.ok()) << store.status();
  Checkpointer checkpointer({}, store->get(), core_.get(), nullptr, log_.Log());
  WeightsFileWriter weights(dir + "/model.safetensors", core_.get(),
                            Env::Default(), absl::Seconds(1), log_.Log());
  JobWatchdog watchdog = Make({}, &checkpointer, &weights);
  ASSERT_TRUE(core_->Leave(0, inc0_).ok());
  EXPECT_EQ(watchdog.FinishIfDone(), std::nullopt) << "rank 1 is still in";
  ASSERT_TRUE(core_->Leave(1, inc1_).ok());
  EXPECT_EQ(watchdog.FinishIfDone(), kExitOk);
  EXPECT_THAT(log_.lines,
              ElementsAre("every worker has left",
                          absl::StrCat("checkpoint of version 0 in ", dir,
                                       "/shard-0-of-1/ckpt-000000000000.lsc"),
                          absl::StrCat("weights of version 0 in ", dir,
                                       "/model.safetensors")));
}

TEST_F(JobWatchdogTest, AWeightsFileThatCannotBeWrittenFailsTheEnd) {
  WeightsFileWriter weights(NewTempDir() + "/missing/model.safetensors",
                            core_.get(), Env::Default(), absl::Seconds(1),
                            log_.Log());
  JobWatchdog watchdog = Make({}, nullptr, &weights);
  BothLeave();
  EXPECT_EQ(watchdog.FinishIfDone(), kExitFailure);
  ASSERT_EQ(log_.lines.size(), 2u);
  EXPECT_THAT(log_.lines[1], StartsWith("writing the weights file failed: "));
}

TEST_F(JobWatchdogTest, ARankThatFailedFailsTheJobWithTheModelSaved) {
  const std::string dir = NewTempDir();
  WeightsFileWriter weights(dir + "/model.safetensors", core_.get(),
                            Env::Default(), absl::Seconds(1), log_.Log());
  JobWatchdog watchdog = Make({}, nullptr, &weights);
  ASSERT_TRUE(core_->Leave(0, inc0_, {LeaveReason::kFinished, ""}).ok());
  ASSERT_TRUE(
      core_->Leave(1, inc1_, {LeaveReason::kFailed, "ValueError: bad batch"})
          .ok());
  EXPECT_EQ(watchdog.FinishIfDone(), kExitFailure);
  EXPECT_THAT(log_.lines,
              ElementsAre("every worker has left, but the job failed: rank 1: "
                          "ValueError: bad batch",
                          absl::StrCat("weights of version 0 in ", dir,
                                       "/model.safetensors")));
}

// A rank that fails while the other trains is named at once, with what it
// said, not only when the job ends (the red team found the job waiting in
// silence for the replacement), and only once.
TEST_F(JobWatchdogTest, ARankThatFailedIsNamedAtOnceWhileTheJobWaits) {
  JobWatchdog watchdog = Make({});
  ASSERT_TRUE(
      core_->Leave(1, inc1_, {LeaveReason::kFailed, "RuntimeError: boom"})
          .ok());
  EXPECT_EQ(watchdog.CheckStepTimeouts(clock_.Now()), std::nullopt);
  EXPECT_EQ(watchdog.CheckStepTimeouts(clock_.Now()), std::nullopt);
  EXPECT_THAT(log_.lines,
              ElementsAre("rank 1 left the job saying it failed: "
                          "RuntimeError: boom; the job goes on waiting for a "
                          "replacement of it, and fails at its end if none "
                          "registers"));
  EXPECT_EQ(watchdog.FinishIfDone(), std::nullopt) << "rank 0 trains";
}

TEST_F(JobWatchdogTest, LeavesOfRanksThatNeverCalledDoNotEndAJob) {
  // A fresh server: no rank registered, no coordinator call.
  std::unique_ptr<ParameterServer> fresh = TwoWorkerCore(&clock_);
  JobWatchdog watchdog(JobWatchdog::Options(), fresh.get(), nullptr, nullptr,
                       log_.Log());
  ASSERT_TRUE(fresh->Leave(0, 0).ok());
  ASSERT_TRUE(fresh->Leave(1, 0).ok());
  EXPECT_TRUE(fresh->WaitUntilDone(absl::ZeroDuration()));
  EXPECT_EQ(watchdog.FinishIfDone(), std::nullopt);
  EXPECT_THAT(log_.lines, IsEmpty());
  // Once a rank has called, its leave ends the job.
  auto registered = fresh->Register(0, SmallSignature(2));
  ASSERT_TRUE(registered.ok());
  EXPECT_EQ(watchdog.FinishIfDone(), std::nullopt) << "rank 0 is back in";
  ASSERT_TRUE(fresh->Leave(0, registered->incarnation).ok());
  EXPECT_EQ(watchdog.FinishIfDone(), kExitOk);
}

TEST_F(JobWatchdogTest, WithoutExitWhenDoneTheServerStays) {
  JobWatchdog::Options options;
  options.exit_when_done = false;
  JobWatchdog watchdog = Make(options);
  BothLeave();
  EXPECT_EQ(watchdog.FinishIfDone(), std::nullopt);
  EXPECT_THAT(log_.lines, IsEmpty());
}

}  // namespace
}  // namespace lockstep
