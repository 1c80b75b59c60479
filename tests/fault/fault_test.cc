// Fault tests: real lockstep_server and lockstep_worker processes on
// loopback, killed, stopped and restarted with real signals. In every case
// nothing hangs, no partial step is applied, no step is applied twice, and
// where the scenario allows the final weights equal a fault-free run's
// exactly (two workers, whose sum does not depend on the order, or three
// summed in rank order). This file: workers lost, stopped or doubled;
// checkpoint_fault_test.cc: servers restarted and their checkpoints;
// stop_fault_test.cc: stop signals.
#include <dirent.h>
#include <signal.h>
#include <unistd.h>

#include <algorithm>
#include <cstring>
#include <string>
#include <vector>

#include "absl/strings/match.h"
#include "absl/strings/str_cat.h"
#include "absl/time/clock.h"
#include "gmock/gmock.h"
#include "gtest/gtest.h"
#include "tests/fault/fault_flags.h"
#include "tests/fault/job.h"
#include "tests/integration/training_jobs.h"

namespace lockstep {
namespace {

using ::testing::HasSubstr;
using ::testing::Not;

TEST(FaultTest, KilledWorkerIsReplacedAndTheResultIsUnchanged) {
  Job job(2);
  job.StartServer({"--step_timeout_s=2", "--on_worker_loss=wait"});
  job.StartWorker(0, Flags());
  job.StartWorker(1, Flags({"--straggle=1:50"}));
  ASSERT_TRUE(job.WaitForVersion(8)) << job.ServerOutput();
  job.Signal(job.worker(1), SIGKILL);
  job.StartWorker(1, Flags());  // The replacement, same rank.
  EXPECT_EQ(job.WaitWorker(0), 0) << job.WorkerOutput(0);
  EXPECT_EQ(job.WaitWorker(1), 0) << job.WorkerOutput(1);
  EXPECT_EQ(job.WaitServer(), 0) << job.ServerOutput();
  EXPECT_EQ(job.Weights(0), Reference());
  EXPECT_EQ(job.Weights(1), Reference());
}

// Three workers: the order of a sum now matters, and the server sums in
// rank order (--sum_order=rank) so that the recovered run still equals the
// fault-free one bit for bit. Rank 1 dies mid-job, rank 2 is slow.
TEST(FaultTest, KilledWorkerOfThreeSummedInRankOrderGivesTheSameBits) {
  const std::vector<std::string> server = {"--sum_order=rank"};
  Job clean(3);
  clean.StartServer(server);
  for (int r = 0; r < 3; ++r) clean.StartWorker(r, Flags());
  for (int r = 0; r < 3; ++r) {
    ASSERT_EQ(clean.WaitWorker(r), 0) << clean.WorkerOutput(r);
  }
  ASSERT_EQ(clean.WaitServer(), 0) << clean.ServerOutput();
  const std::vector<float> reference = clean.Weights(0);

  Job job(3);
  job.StartServer({"--sum_order=rank", "--step_timeout_s=2"});
  job.StartWorker(0, Flags());
  job.StartWorker(1, Flags());
  job.StartWorker(2, Flags({"--straggle=2:50"}));
  ASSERT_TRUE(job.WaitForVersion(8)) << job.ServerOutput();
  job.Signal(job.worker(1), SIGKILL);
  job.StartWorker(1, Flags());
  for (int r = 0; r < 3; ++r) {
    EXPECT_EQ(job.WaitWorker(r), 0) << job.WorkerOutput(r);
  }
  EXPECT_EQ(job.WaitServer(), 0) << job.ServerOutput();
  for (int r = 0; r < 3; ++r) EXPECT_EQ(job.Weights(r), reference) << r;
}

TEST(FaultTest, StoppedWorkerIsEvictedThenRecovers) {
  Job job(2);
  job.StartServer({"--step_timeout_s=1", "--on_worker_loss=wait"});
  job.StartWorker(0, Flags());
  job.StartWorker(1, Flags({"--straggle=1:50"}));
  ASSERT_TRUE(job.WaitForVersion(8)) << job.ServerOutput();
  job.Signal(job.worker(1), SIGSTOP);
  ASSERT_TRUE(job.WaitForServerLog("timed out waiting for rank(s) 1"))
      << job.ServerOutput();
  job.Signal(job.worker(1), SIGCONT);
  EXPECT_EQ(job.WaitWorker(0), 0) << job.WorkerOutput(0);
  EXPECT_EQ(job.WaitWorker(1), 0) << job.WorkerOutput(1);
  EXPECT_THAT(job.WorkerOutput(1), HasSubstr("evicted"));
  EXPECT_EQ(job.WaitServer(), 0) << job.ServerOutput();
  EXPECT_EQ(job.Weights(0), Reference());
  EXPECT_EQ(job.Weights(1), Reference());
}

TEST(FaultTest, LostWorkerFailsTheJobRetryablyWhenAskedTo) {
  Job job(2);
  // The timeout fails the whole job, so it must not catch a slow start
  // under load: the first step's timer starts at rank 0's first push.
  job.StartServer({"--step_timeout_s=5", "--on_worker_loss=fail"});
  job.StartWorker(0, Flags());
  job.StartWorker(1, Flags({"--straggle=1:50"}));
  ASSERT_TRUE(job.WaitForVersion(5)) << job.ServerOutput();
  job.Signal(job.worker(1), SIGKILL);
  EXPECT_EQ(job.WaitServer(), 75) << job.ServerOutput();
  EXPECT_EQ(job.WaitWorker(0), 75) << job.WorkerOutput(0);
  EXPECT_THAT(job.WorkerOutput(0), HasSubstr("the job failed"));
}

// Two SSP workers (staleness 2), rank 1 a little slow.
void StartSspWorkers(Job& job) {
  const std::vector<std::string> ssp = {"--sync=ssp", "--staleness=2"};
  job.StartWorker(0, Flags(ssp));
  std::vector<std::string> slow = ssp;
  slow.push_back("--straggle=1:50");
  job.StartWorker(1, Flags(slow));
}

// SSP (staleness 2): rank 1 killed, rank 0 runs two steps ahead and then
// waits for it. The step timeout notices the stall, and with
// --on_worker_loss=fail ends the job retryably, as in sync mode.
TEST(FaultTest, LostSspWorkerIsNoticedAndFailsTheJobWhenAsked) {
  Job job(2);
  job.StartServer({"--step_timeout_s=3", "--on_worker_loss=fail"});
  StartSspWorkers(job);
  ASSERT_TRUE(job.WaitForVersion(10)) << job.ServerOutput();
  job.Signal(job.worker(1), SIGKILL);
  EXPECT_EQ(job.WaitServer(), 75) << job.ServerOutput();
  EXPECT_THAT(job.ServerOutput(), HasSubstr("timed out waiting for rank(s) 1"));
  EXPECT_EQ(job.WaitWorker(0), 75) << job.WorkerOutput(0);
  EXPECT_THAT(job.WorkerOutput(0), HasSubstr("the job failed"));
}

// SSP (staleness 2): rank 1 stopped. Past the step timeout it is evicted,
// as in sync mode, and rank 0 finishes its whole run while rank 1 is still
// stopped; continued, rank 1 registers again and finishes too, each of the
// 2 x 40 pushes applied once.
TEST(FaultTest, StoppedSspWorkerIsEvictedAndTheOthersGoOn) {
  Job job(2);
  job.StartServer({"--step_timeout_s=2"});
  StartSspWorkers(job);
  ASSERT_TRUE(job.WaitForVersion(10)) << job.ServerOutput();
  job.Signal(job.worker(1), SIGSTOP);
  EXPECT_EQ(job.WaitWorker(0), 0) << job.WorkerOutput(0);
  EXPECT_THAT(job.ServerOutput(), HasSubstr("ssp: rank(s) 1 have not pushed"));
  job.Signal(job.worker(1), SIGCONT);
  EXPECT_EQ(job.WaitWorker(1), 0) << job.WorkerOutput(1);
  EXPECT_THAT(job.WorkerOutput(1), HasSubstr("evicted"));
  EXPECT_EQ(job.WaitServer(), 0) << job.ServerOutput();
  EXPECT_THAT(job.ServerOutput(), HasSubstr("version 80"));
}

// A lost worker that is never replaced: the survivor registers again
// after every timed-out step, which succeeds, but no step does. It gives
// up --rejoin_timeout_s after its last step (exit 75), not never.
TEST(FaultTest, SurvivorOfALostWorkerGivesUpAfterTheRejoinTimeout) {
  Job job(2);
  job.StartServer({"--step_timeout_s=1"});
  const std::vector<std::string> timeouts = {"--rejoin_timeout_s=3",
                                             "--step_timeout_s=2"};
  job.StartWorker(0, Flags(timeouts));
  std::vector<std::string> slow = timeouts;
  slow.push_back("--straggle=1:50");
  job.StartWorker(1, Flags(slow));
  ASSERT_TRUE(job.WaitForVersion(5)) << job.ServerOutput();
  job.Signal(job.worker(1), SIGKILL);
  const absl::Time killed = absl::Now();
  EXPECT_EQ(job.WaitWorker(0), 75) << job.WorkerOutput(0);
  EXPECT_LT(absl::Now() - killed, absl::Seconds(30));
  EXPECT_THAT(job.WorkerOutput(0),
              HasSubstr("no step succeeded in 3s (--rejoin_timeout_s)"));
  job.Signal(job.server(), SIGTERM);
  EXPECT_EQ(job.WaitServer(), 0) << job.ServerOutput();
}

// Nothing waits forever: with every worker lost and none replaced, the
// server gives up after --no_worker_timeout_s with the retryable code,
// its progress checkpointed, and a restarted job resumes from it.
TEST(FaultTest, ServerWithNoWorkerLeftGivesUpRetryably) {
  Job job(2);
  job.StartServer({"--step_timeout_s=1", "--no_worker_timeout_s=2"});
  const std::vector<std::string> timeouts = {"--rejoin_timeout_s=2",
                                             "--step_timeout_s=2"};
  job.StartWorker(0, Flags(timeouts));
  std::vector<std::string> slow = timeouts;
  slow.push_back("--straggle=1:50");
  job.StartWorker(1, Flags(slow));
  ASSERT_TRUE(job.WaitForVersion(5)) << job.ServerOutput();
  job.Signal(job.worker(1), SIGKILL);
  EXPECT_EQ(job.WaitWorker(0), 75) << job.WorkerOutput(0);
  const absl::Time survivor_gone = absl::Now();
  EXPECT_EQ(job.WaitServer(), 75) << job.ServerOutput();
  EXPECT_LT(absl::Now() - survivor_gone, absl::Seconds(30));
  EXPECT_THAT(job.ServerOutput(), HasSubstr("(--no_worker_timeout_s)"));
  EXPECT_THAT(job.ServerOutput(), HasSubstr("checkpoint of version"));
  ASSERT_FALSE(job.CheckpointFiles().empty());
  // The job goes on from there when it is started again.
  job.StartServer({});
  job.StartWorker(0, Flags());
  job.StartWorker(1, Flags());
  EXPECT_EQ(job.WaitWorker(0), 0) << job.WorkerOutput(0);
  EXPECT_EQ(job.WaitWorker(1), 0) << job.WorkerOutput(1);
  EXPECT_EQ(job.WaitServer(), 0) << job.ServerOutput();
  EXPECT_THAT(job.ServerOutput(), HasSubstr("restored version"));
  EXPECT_EQ(job.Weights(0), Reference());  // Nothing lost, nothing twice.
}

TEST(FaultTest, TwoWorkersClaimingOneRank) {
  Job job(2);
  job.StartServer({"--step_timeout_s=5"});
  job.StartWorker(0, Flags());
  // Slow enough that the second starts long before the job could end.
  job.StartWorker(1, Flags({"--straggle=1:20"}));
  job.StartWorker(1, Flags({"--straggle=1:20"}), /*slot=*/2);
  const int a = job.WaitWorker(1);
  const int b = job.WaitWorker(2);
  EXPECT_EQ(job.WaitWorker(0), 0) << job.WorkerOutput(0);
  // One of them finishes the job; the other is told, permanently.
  EXPECT_TRUE((a == 0 && b == 2) || (a == 2 && b == 0))
      << a << " " << b << "\n" << job.WorkerOutput(1) << job.WorkerOutput(2);
  EXPECT_THAT(job.WorkerOutput(1) + job.WorkerOutput(2),
              HasSubstr("another worker registered as rank 1"));
  EXPECT_EQ(job.WaitServer(), 0) << job.ServerOutput();
  EXPECT_EQ(job.Weights(0), Reference());
}

TEST(FaultTest, UnevenDataEndsWithoutDeadlockAndMismatchIsRefused) {
  // 100 examples, 3 workers x 8: every worker takes floor(100/24) = 4 steps
  // an epoch and the remainder is dropped, so all reach the same end.
  Job job(3);
  job.StartServer({"--step_timeout_s=30"});
  const std::vector<std::string> flags = {
      "--dataset=synthetic", "--synthetic_examples=100", "--layers=5,3",
      "--batch_size=8",      "--epochs=2",               "--progress=none"};
  for (int rank = 0; rank < 3; ++rank) job.StartWorker(rank, flags);
  for (int rank = 0; rank < 3; ++rank) {
    EXPECT_EQ(job.WaitWorker(rank), 0) << job.WorkerOutput(rank);
  }
  EXPECT_EQ(job.WaitServer(), 0);
  // A worker whose data gives another length is refused at once.
  Job other(2);
  other.StartServer({});
  other.StartWorker(0, flags);
  std::vector<std::string> more = flags;
  more.push_back("--synthetic_examples=200");
  other.StartWorker(1, more);
  EXPECT_EQ(other.WaitWorker(1), 2) << other.WorkerOutput(1);
  EXPECT_THAT(other.WorkerOutput(1), HasSubstr("total_steps"));
}

// A server lost mid-step while most chunks wait in the push window's
// queue: the step fails with the push's error, the queued chunks are never
// sent, and the workers leave with the retryable code (a crash once).
TEST(FaultTest, ServerLostWithPushesQueuedInTheWindow) {
  Job job(2);
  job.StartServer({});
  const std::vector<std::string> flags = Flags(
      {"--chunk_bytes=64", "--push_window=1", "--rejoin_timeout_s=2"});
  job.StartWorker(0, flags);
  job.StartWorker(1, flags);
  ASSERT_TRUE(job.WaitForVersion(3)) << job.ServerOutput();
  job.Signal(job.server(), SIGKILL);
  job.WaitServer();
  for (int rank = 0; rank < 2; ++rank) {
    EXPECT_EQ(job.WaitWorker(rank), 75) << job.WorkerOutput(rank);
  }
}

}  // namespace
}  // namespace lockstep
