// All-reduce fault tests: real lockstep_worker processes in --sync=allreduce
// (the server only hosts the coordinator), a rank SIGKILLed and replaced or
// SIGSTOPped past its peers' step timeout. The step that failed is applied
// nowhere, the group re-forms at the coordinator, a member behind takes the
// weights and the optimizer's state from a live peer, and the job ends with
// the fault-free run's weights bit for bit (gloo and the gRPC ring sum in
// an order fixed by the ranks).
#include <signal.h>

#include <string>
#include <vector>

#include "absl/strings/str_cat.h"
#include "gmock/gmock.h"
#include "gtest/gtest.h"
#include "tests/fault/fault_flags.h"
#include "tests/fault/job.h"

namespace lockstep {
namespace {

using ::testing::HasSubstr;

// Flags() in all-reduce mode with `backend`, peers' losses noticed within
// 2 s; `extra` after.
std::vector<std::string> AllReduceFlags(const std::string& backend,
                                        std::vector<std::string> extra = {}) {
  std::vector<std::string> flags =
      Flags({"--sync=allreduce", absl::StrCat("--allreduce=", backend),
             "--step_timeout_s=2"});
  flags.insert(flags.end(), extra.begin(), extra.end());
  return flags;
}

// Rank 0's final weights of a fault-free all-reduce run of `workers`.
std::vector<float> CleanWeights(const std::string& backend, int workers) {
  Job clean(workers);
  clean.StartServer({});
  for (int r = 0; r < workers; ++r) {
    clean.StartWorker(r, AllReduceFlags(backend));
  }
  for (int r = 0; r < workers; ++r) {
    EXPECT_EQ(clean.WaitWorker(r), 0) << clean.WorkerOutput(r);
  }
  EXPECT_EQ(clean.WaitServer(), 0) << clean.ServerOutput();
  return clean.Weights(0);
}

class AllReduceFaultTest : public ::testing::TestWithParam<std::string> {};

// Rank 1 is SIGKILLed a quarter into the job and a new process takes its
// place: it joins the re-formed group with nothing trained, takes version
// and state from rank 0, and both finish with the fault-free weights.
TEST_P(AllReduceFaultTest, KilledRankIsReplacedAndTheResultIsUnchanged) {
  const std::string backend = GetParam();
  const std::vector<float> reference = CleanWeights(backend, 2);
  ASSERT_FALSE(reference.empty());
  Job job(2);
  job.StartServer({});
  job.StartWorker(0, AllReduceFlags(backend, {"--progress=lines"}));
  job.StartWorker(1, AllReduceFlags(backend, {"--straggle=1:50"}));
  ASSERT_TRUE(job.WaitForWorkerLog(0, "10/40 [")) << job.WorkerOutput(0);
  job.Signal(job.worker(1), SIGKILL);
  job.WaitWorker(1);
  job.StartWorker(1, AllReduceFlags(backend));  // The replacement.
  EXPECT_EQ(job.WaitWorker(0), 0) << job.WorkerOutput(0);
  EXPECT_EQ(job.WaitWorker(1), 0) << job.WorkerOutput(1);
  EXPECT_EQ(job.WaitServer(), 0) << job.ServerOutput();
  EXPECT_THAT(job.WorkerOutput(0), HasSubstr("registering again"));
  EXPECT_THAT(job.WorkerOutput(1), HasSubstr("Rank 1 took version "));
  EXPECT_EQ(job.Weights(0), reference);
  EXPECT_EQ(job.Weights(1), reference);
}

// Three ranks; rank 2 is SIGSTOPped for longer than its peers' step
// timeout, then continued. The peers abort the step and wait for the group
// to re-form; the stopped rank finds its collective failed (not SIGPIPE),
// joins too, and all three end with the fault-free weights.
TEST_P(AllReduceFaultTest, StoppedRankRejoinsAndTheResultIsUnchanged) {
  const std::string backend = GetParam();
  const std::vector<float> reference = CleanWeights(backend, 3);
  ASSERT_FALSE(reference.empty());
  Job job(3);
  job.StartServer({});
  job.StartWorker(0, AllReduceFlags(backend, {"--progress=lines"}));
  job.StartWorker(1, AllReduceFlags(backend));
  job.StartWorker(2, AllReduceFlags(backend, {"--straggle=2:50"}));
  // 3 x 8 of 640 examples: 26 steps an epoch, progress at a quarter.
  ASSERT_TRUE(job.WaitForWorkerLog(0, "6/26 [")) << job.WorkerOutput(0);
  job.Signal(job.worker(2), SIGSTOP);
  ASSERT_TRUE(job.WaitForWorkerLog(0, "registering again"))
      << job.WorkerOutput(0);
  ASSERT_TRUE(job.WaitForWorkerLog(1, "registering again"))
      << job.WorkerOutput(1);
  job.Signal(job.worker(2), SIGCONT);
  for (int r = 0; r < 3; ++r) {
    EXPECT_EQ(job.WaitWorker(r), 0) << job.WorkerOutput(r);
  }
  EXPECT_EQ(job.WaitServer(), 0) << job.ServerOutput();
  for (int r = 0; r < 3; ++r) EXPECT_EQ(job.Weights(r), reference) << r;
}

// A lost rank never replaced: the survivor waits for the group to re-form
// for --rejoin_timeout_s and no longer, then exits with the retryable code.
TEST_P(AllReduceFaultTest, SurvivorOfALostRankGivesUpAfterTheRejoinTimeout) {
  const std::string backend = GetParam();
  Job job(2);
  job.StartServer({});
  job.StartWorker(
      0, AllReduceFlags(backend, {"--progress=lines", "--rejoin_timeout_s=3"}));
  job.StartWorker(1, AllReduceFlags(backend, {"--straggle=1:50"}));
  ASSERT_TRUE(job.WaitForWorkerLog(0, "10/40 [")) << job.WorkerOutput(0);
  job.Signal(job.worker(1), SIGKILL);
  EXPECT_EQ(job.WaitWorker(0), 75) << job.WorkerOutput(0);
  EXPECT_THAT(job.WorkerOutput(0), HasSubstr("--rejoin_timeout_s"));
  job.WaitWorker(1);
  job.Signal(job.server(), SIGTERM);
  job.WaitServer();
}

INSTANTIATE_TEST_SUITE_P(Backends, AllReduceFaultTest,
                         ::testing::Values("gloo", "grpc-ring"),
                         [](const auto& info) {
                           return info.param == "gloo" ? std::string("Gloo")
                                                       : std::string("Ring");
                         });

}  // namespace
}  // namespace lockstep
