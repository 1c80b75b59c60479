// Fault tests (see fault_test.cc) of stop signals: a pod's SIGTERM, a
// terminal's Ctrl-C reaching every process, a second signal, a worker that
// waits (for an absent peer, a stuck server) ended at once, and the
// all-reduce ranks agreeing on a stop.
#include <dirent.h>
#include <signal.h>
#include <unistd.h>

#include <algorithm>
#include <cstring>
#include <string>
#include <utility>
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

// Sends `signals` to worker `slot`, 100 ms apart, and returns how long it
// took to exit from the first; its exit code in *code.
absl::Duration StopAndTime(Job& job, int slot, const std::vector<int>& signals,
                           int* code) {
  const absl::Time start = absl::Now();
  for (size_t i = 0; i < signals.size(); ++i) {
    if (i > 0) absl::SleepFor(absl::Milliseconds(100));
    job.Signal(job.worker(slot), signals[i]);
  }
  *code = job.WaitWorker(slot);
  return absl::Now() - start;
}

// The bound of a stop: about a second by design (StopSignals), asserted
// with room for a loaded machine.
constexpr absl::Duration kStopBound = absl::Seconds(5);

// Rank 0 of two with rank 1 never started waits at the barrier of step 0
// (up to --step_timeout_s). A stop signal cancels the wait: it leaves the
// job (the server counts it finished) and exits 143 at once. The same with
// a second signal (SIGINT after SIGTERM: one stop).
TEST(FaultTest, AStopSignalEndsAWorkerWaitingForAnAbsentPeer) {
  for (const std::vector<int>& signals :
       {std::vector<int>{SIGTERM}, std::vector<int>{SIGTERM, SIGINT}}) {
    SCOPED_TRACE(signals.size());
    Job job(2);
    job.StartServer({});
    job.StartWorker(0, Flags({"--step_timeout_s=300"}));
    ASSERT_TRUE(job.WaitForPushFrom(0)) << job.WorkerOutput(0);
    int code = 0;
    const absl::Duration took = StopAndTime(job, 0, signals, &code);
    EXPECT_EQ(code, 143) << job.WorkerOutput(0);
    EXPECT_LT(took, kStopBound) << job.WorkerOutput(0);
    EXPECT_THAT(job.WorkerOutput(0),
                HasSubstr("Left the job after a stop signal at version 0"));
    EXPECT_EQ(job.FinishedRanks(), std::vector<int>{0}) << job.ServerOutput();
    job.Signal(job.server(), SIGKILL);
    job.WaitServer();
  }
}

// All-reduce: rank 0 waits for rank 1 at the coordinator for the group to
// form, a wait that is not cancelled; the watchdog tells the server that it
// leaves and exits 143. With the gRPC ring and gloo.
TEST(FaultTest, AStopSignalEndsAnAllReduceWorkerWaitingForAnAbsentPeer) {
  for (const char* backend : {"grpc-ring", "gloo"}) {
    SCOPED_TRACE(backend);
    Job job(2);
    job.StartServer({});
    job.StartWorker(
        0, Flags({"--sync=allreduce", absl::StrCat("--allreduce=", backend),
                  "--connect_timeout_s=300"}));
    ASSERT_TRUE(job.WaitForWorkerLog(0, "Waiting for the all-reduce group"))
        << job.WorkerOutput(0);
    int code = 0;
    const absl::Duration took = StopAndTime(job, 0, {SIGTERM}, &code);
    EXPECT_EQ(code, 143) << job.WorkerOutput(0);
    EXPECT_LT(took, kStopBound) << job.WorkerOutput(0);
    EXPECT_THAT(job.WorkerOutput(0), HasSubstr("leaving the job and exiting"));
    EXPECT_EQ(job.FinishedRanks(), std::vector<int>{0}) << job.ServerOutput();
    job.Signal(job.server(), SIGKILL);
    job.WaitServer();
  }
}

// A worker stuck in a step because its server stopped (SIGSTOP) ends at
// once too: its calls are cancelled and its Leave, which the server cannot
// take, has a short deadline.
TEST(FaultTest, AStopSignalEndsAWorkerWhoseServerIsStuck) {
  Job job(1);
  job.StartServer({});
  job.StartWorker(0, Flags({"--straggle=0:50", "--step_timeout_s=600"}));
  ASSERT_TRUE(job.WaitForVersion(3)) << job.ServerOutput();
  job.Signal(job.server(), SIGSTOP);
  int code = 0;
  const absl::Duration took = StopAndTime(job, 0, {SIGTERM}, &code);
  EXPECT_EQ(code, 143) << job.WorkerOutput(0);
  EXPECT_LT(took, kStopBound) << job.WorkerOutput(0);
  EXPECT_THAT(job.WorkerOutput(0), HasSubstr("could not leave the job"));
  job.Signal(job.server(), SIGCONT);
  job.Signal(job.server(), SIGKILL);
  job.WaitServer();
}

TEST(FaultTest, SigtermDrainsTheServerAndWorkersLeave) {
  Job job(2);
  job.StartServer({});
  job.StartWorker(0, Flags({"--rejoin_timeout_s=2"}));
  job.StartWorker(1, Flags({"--straggle=1:50", "--rejoin_timeout_s=2"}));
  ASSERT_TRUE(job.WaitForVersion(5)) << job.ServerOutput();
  job.Signal(job.server(), SIGTERM);
  EXPECT_EQ(job.WaitServer(), 0) << job.ServerOutput();
  EXPECT_THAT(job.ServerOutput(), HasSubstr("checkpoint of version"));
  // With the server gone for good, workers give up with the retryable code.
  EXPECT_EQ(job.WaitWorker(0), 75) << job.WorkerOutput(0);
  EXPECT_EQ(job.WaitWorker(1), 75) << job.WorkerOutput(1);
  // A worker told to stop leaves after its step.
  Job second(1);
  second.StartServer({});
  second.StartWorker(0, Flags({"--straggle=0:50"}));
  ASSERT_TRUE(second.WaitForVersion(3));
  second.Signal(second.worker(0), SIGTERM);
  EXPECT_EQ(second.WaitWorker(0), 143) << second.WorkerOutput(0);
  EXPECT_THAT(second.WorkerOutput(0), HasSubstr("Left the job"));
  EXPECT_EQ(second.WaitServer(), 0) << "its Leave ends the job";
}

// A terminal's Ctrl-C reaches a launcher's workers directly and again as
// the launcher's SIGTERM: two signals at once are one stop, and the worker
// still leaves the job after its step.
TEST(FaultTest, TwoStopSignalsAtOnceAreOneStop) {
  Job job(1);
  job.StartServer({});
  job.StartWorker(0, Flags({"--straggle=0:50"}));
  ASSERT_TRUE(job.WaitForVersion(3)) << job.ServerOutput();
  job.Signal(job.worker(0), SIGINT);
  absl::SleepFor(absl::Milliseconds(20));
  job.Signal(job.worker(0), SIGTERM);
  EXPECT_EQ(job.WaitWorker(0), 143) << job.WorkerOutput(0);
  EXPECT_THAT(job.WorkerOutput(0), HasSubstr("Left the job"));
  EXPECT_EQ(job.WaitServer(), 0) << "its Leave ends the job";
}

// Starts `job`'s server and three all-reduce ranks (3 x 8 of 640 examples:
// 26 steps an epoch, --max_steps=40 of them, 50 ms each) and returns once
// rank 0's first progress line (a quarter of the first epoch) is out.
void StartAllReduceJobAndWait(Job& job) {
  job.StartServer({});
  const std::vector<std::string> flags = {
      "--sync=allreduce", "--step_timeout_s=60", "--straggle=2:50"};
  std::vector<std::string> rank0 = flags;
  rank0.push_back("--progress=lines");
  job.StartWorker(0, Flags(rank0));
  job.StartWorker(1, Flags(flags));
  job.StartWorker(2, Flags(flags));
  ASSERT_TRUE(job.WaitForWorkerLog(0, "/26 [")) << job.WorkerOutput(0);
}

// All-reduce: one rank told to stop. Its peers learn it with that step's
// sum and every rank stops after the same step, instead of the others
// waiting in a step it will not take until --step_timeout_s (exit 75).
TEST(FaultTest, AnAllReduceStopIsAgreedByEveryRank) {
  Job job(3);
  StartAllReduceJobAndWait(job);
  if (::testing::Test::HasFatalFailure()) return;
  job.Signal(job.worker(1), SIGTERM);
  constexpr char kLeft[] = "Left the job after a stop signal at version ";
  int64_t version = -1;
  for (int r = 0; r < 3; ++r) {
    EXPECT_EQ(job.WaitWorker(r), 143) << job.WorkerOutput(r);
    const std::string out = job.WorkerOutput(r);
    const size_t at = out.find(kLeft);
    ASSERT_NE(at, std::string::npos) << out;
    const int64_t v = std::stoll(out.substr(at + std::strlen(kLeft)));
    if (r == 0) version = v;
    EXPECT_EQ(v, version) << "rank " << r << " stopped after another step";
  }
  EXPECT_LT(version, 40) << "stopped before the job's end";
  EXPECT_EQ(job.WaitServer(), 0) << job.ServerOutput();
}

// All-reduce: a rank told to stop whose step then fails (a peer died; the
// launcher stops the others when one crashes) ends as a stop, 143, not as
// the failure.
TEST(FaultTest, ASignalledAllReduceRankWhosePeerDiedStops) {
  Job job(3);
  StartAllReduceJobAndWait(job);
  if (::testing::Test::HasFatalFailure()) return;
  job.Signal(job.worker(0), SIGTERM);
  job.Signal(job.worker(1), SIGTERM);
  job.Signal(job.worker(2), SIGKILL);
  for (int r = 0; r < 2; ++r) {
    EXPECT_EQ(job.WaitWorker(r), 143) << job.WorkerOutput(r);
  }
  job.WaitWorker(2);
  job.Signal(job.server(), SIGTERM);
  job.WaitServer();
}

// The whole job told to stop at once (a launcher's or a pod's SIGTERM):
// the server drains while the workers are mid-step. Each worker stops
// (143) instead of registering again with the draining server until it is
// killed, or exiting 75 because the server could not take its Leave.
TEST(FaultTest, SigtermToEveryoneAtOnceStopsEveryoneCleanly) {
  for (const char* sync : {"--sync=ps", "--sync=allreduce"}) {
    SCOPED_TRACE(sync);
    Job job(2);
    job.StartServer({});
    // 120 steps of at least 50 ms: the signals land mid-job. Rank 0's
    // progress line at a quarter of the epoch (step 10) says it is under way
    // (in all-reduce mode the server's version does not move).
    const std::vector<std::string> flags = {sync, "--max_steps=120",
                                            "--progress=lines"};
    job.StartWorker(0, Flags(flags));
    job.StartWorker(1, Flags({sync, "--max_steps=120", "--straggle=1:50"}));
    ASSERT_TRUE(job.WaitForWorkerLog(0, "10/40 [")) << job.WorkerOutput(0);
    job.Signal(job.server(), SIGTERM);
    job.Signal(job.worker(0), SIGTERM);
    job.Signal(job.worker(1), SIGTERM);
    // 143 is also what a worker killed by the signal itself would give: the
    // log says it stopped on purpose.
    for (int r = 0; r < 2; ++r) {
      EXPECT_EQ(job.WaitWorker(r), 143) << job.WorkerOutput(r);
      EXPECT_THAT(job.WorkerOutput(r), HasSubstr("stop signal received"));
      EXPECT_THAT(job.WorkerOutput(r), Not(HasSubstr("40/40 [")));
    }
    EXPECT_EQ(job.WaitServer(), 0) << job.ServerOutput();
  }
}

}  // namespace
}  // namespace lockstep
