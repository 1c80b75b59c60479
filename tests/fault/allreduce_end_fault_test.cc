// How an all-reduce job ends when it should not go on, with real
// lockstep_worker processes in --sync=allreduce over gloo and the server
// hosting only the coordinator: a step whose summed gradient is not finite
// ends every rank with the permanent code (as a parameter server refuses
// such a push), and a server whose ranks were all lost gives up after
// --no_worker_timeout_s, while one whose ranks train on does not; a
// coordinator lost for good costs no trained model.
#include <signal.h>

#include <string>
#include <vector>

#include "absl/time/clock.h"
#include "gmock/gmock.h"
#include "gtest/gtest.h"
#include "tests/fault/fault_flags.h"
#include "tests/fault/job.h"

namespace lockstep {
namespace {

using ::testing::HasSubstr;
using ::testing::Not;

std::vector<std::string> GlooFlags(std::vector<std::string> extra) {
  std::vector<std::string> flags =
      Flags({"--sync=allreduce", "--allreduce=gloo", "--step_timeout_s=2"});
  flags.insert(flags.end(), extra.begin(), extra.end());
  return flags;
}

// --lr=1e30 sends the weights past fp32's range within a few steps: the
// first step whose sum holds a NaN or Inf is applied on no rank, and every
// rank exits 2 instead of training on to a NaN model and exiting 0.
TEST(AllReduceEndFaultTest, ANonFiniteSumEndsEveryRankWithThePermanentCode) {
  Job job(2);
  job.StartServer({});
  job.StartWorker(0, GlooFlags({"--lr=1e30"}));
  job.StartWorker(1, GlooFlags({"--lr=1e30"}));
  for (int r = 0; r < 2; ++r) {
    EXPECT_EQ(job.WaitWorker(r), 2) << job.WorkerOutput(r);
    EXPECT_THAT(job.WorkerOutput(r), HasSubstr("is not finite"));
    EXPECT_THAT(job.WorkerOutput(r), HasSubstr("nothing applied"));
    EXPECT_THAT(job.WorkerOutput(r), Not(HasSubstr("Test accuracy")));
  }
  job.Signal(job.server(), SIGTERM);
  job.WaitServer();
}

// Both ranks SIGKILLed mid-job: nothing calls the server but the ranks'
// coordinator calls did, so it gives up --no_worker_timeout_s (2 s) after
// the last of them, with the retryable code.
TEST(AllReduceEndFaultTest, TheServerGivesUpOnceEveryRankIsLost) {
  Job job(2);
  job.StartServer({"--no_worker_timeout_s=2"});
  job.StartWorker(0, GlooFlags({"--progress=lines"}));
  job.StartWorker(1, GlooFlags({"--straggle=1:100"}));
  ASSERT_TRUE(job.WaitForWorkerLog(0, "10/40 [")) << job.WorkerOutput(0);
  job.Signal(job.worker(0), SIGKILL);
  job.Signal(job.worker(1), SIGKILL);
  const absl::Time killed = absl::Now();
  job.WaitWorker(0);
  job.WaitWorker(1);
  EXPECT_EQ(job.WaitServer(), 75) << job.ServerOutput();
  EXPECT_LT(absl::Now() - killed, absl::Seconds(10));
  EXPECT_THAT(job.ServerOutput(), HasSubstr("(--no_worker_timeout_s)"));
}

// Ranks that train for 4 s call nothing but the coordinator (every second,
// worker/exchange/allreduce/contact_thread.h): a 2 s --no_worker_timeout_s
// does not end their job.
TEST(AllReduceEndFaultTest, RanksThatTrainOnKeepTheServerWaiting) {
  Job job(2);
  job.StartServer({"--no_worker_timeout_s=2"});
  job.StartWorker(0, GlooFlags({}));
  job.StartWorker(1, GlooFlags({"--straggle=1:100"}));
  EXPECT_EQ(job.WaitWorker(0), 0) << job.WorkerOutput(0);
  EXPECT_EQ(job.WaitWorker(1), 0) << job.WorkerOutput(1);
  EXPECT_EQ(job.WaitServer(), 0) << job.ServerOutput();
  EXPECT_THAT(job.ServerOutput(), Not(HasSubstr("--no_worker_timeout_s")));
}

// The server (and so the coordinator) SIGKILLed mid-job and never brought
// back: the ranks need it for nothing but joining and leaving, so they
// train to the end, write their weights (the fault-free ones) and only
// then report the leave that failed, with the retryable code.
TEST(AllReduceEndFaultTest, ALostCoordinatorCostsNoTrainedModel) {
  Job clean(2);
  clean.StartServer({});
  clean.StartWorker(0, GlooFlags({}));
  clean.StartWorker(1, GlooFlags({}));
  ASSERT_EQ(clean.WaitWorker(0), 0) << clean.WorkerOutput(0);
  ASSERT_EQ(clean.WaitWorker(1), 0) << clean.WorkerOutput(1);
  ASSERT_EQ(clean.WaitServer(), 0) << clean.ServerOutput();
  const std::vector<float> reference = clean.Weights(0);
  ASSERT_FALSE(reference.empty());

  Job job(2);
  job.StartServer({});
  job.StartWorker(0, GlooFlags({"--progress=lines"}));
  job.StartWorker(1, GlooFlags({"--straggle=1:50"}));
  ASSERT_TRUE(job.WaitForWorkerLog(0, "10/40 [")) << job.WorkerOutput(0);
  job.Signal(job.server(), SIGKILL);
  job.WaitServer();
  for (int r = 0; r < 2; ++r) {
    EXPECT_EQ(job.WaitWorker(r), 75) << job.WorkerOutput(r);
    EXPECT_THAT(job.WorkerOutput(r),
                HasSubstr("trained every step and wrote its outputs, but "
                          "could not leave the job"));
    EXPECT_EQ(job.Weights(r), reference) << "rank " << r;
  }
}

}  // namespace
}  // namespace lockstep
