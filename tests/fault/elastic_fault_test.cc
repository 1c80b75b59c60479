// Elastic all-reduce jobs (--min_workers below --workers) with real
// processes: ranks join and leave at step boundaries, a lost rank is left
// behind once the minimum re-forms, and the global batch stays --workers
// shards, so the result stays that of a job that had every rank throughout
// (to the last bits of the sums, which add a rank's shards first).
#include <signal.h>

#include <cmath>
#include <cstdio>
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

// Flags() for gloo all-reduce with 3 ranks (26 steps an epoch), 60 steps,
// rank 0 paced at 100 ms a step; `elastic` adds --min_workers=2.
std::vector<std::string> ElasticFlags(bool elastic, int rank) {
  std::vector<std::string> flags =
      Flags({"--sync=allreduce", "--allreduce=gloo", "--step_timeout_s=2",
             "--max_steps=60", "--straggle=0:100"});
  if (elastic) {
    flags.insert(flags.end(), {"--min_workers=2", "--group_settle_ms=300"});
  }
  if (rank == 0) flags.push_back("--progress=none");
  return flags;
}

// Rank 0's weights after the same job with every rank throughout, computed
// once.
const std::vector<float>& FullJobWeights() {
  static const std::vector<float>* full = new std::vector<float>(
      FaultFreeWeights(3, {}, [](int r) { return ElasticFlags(false, r); }));
  return *full;
}

// The largest difference between two weight vectors of the same size.
float MaxDifference(const std::vector<float>& a, const std::vector<float>& b) {
  EXPECT_EQ(a.size(), b.size());
  float most = 0;
  for (size_t i = 0; i < a.size() && i < b.size(); ++i) {
    most = std::max(most, std::fabs(a[i] - b[i]));
  }
  return most;
}

// Starts `job`'s server and ranks 0 and 1 of an elastic job of 3, and
// returns once they train as a group of 2.
void StartTwoOfThree(Job& job) {
  job.StartServer({});
  job.StartWorker(0, ElasticFlags(true, 0));
  job.StartWorker(1, ElasticFlags(true, 1));
  ASSERT_TRUE(job.WaitForWorkerLog(0, "(generation 1, 2 of 3 ranks)"))
      << job.WorkerOutput(0);
}

// Ranks 0 and 1 start alone (2 of 3), rank 2 joins mid-job and takes the
// weights from rank 0, then rank 1 is told to stop and leaves (143) while
// the other two go on and finish.
TEST(ElasticTest, AJoinerComesInAndALeaverGoes) {
  const std::vector<float>& full = FullJobWeights();
  ASSERT_FALSE(full.empty());
  Job job(3);
  StartTwoOfThree(job);
  if (::testing::Test::HasFatalFailure()) return;
  job.StartWorker(2, ElasticFlags(true, 2));
  ASSERT_TRUE(job.WaitForWorkerLog(0, "(generation 2, 3 of 3 ranks)"))
      << job.WorkerOutput(0);
  job.Signal(job.worker(1), SIGTERM);
  EXPECT_EQ(job.WaitWorker(1), 143) << job.WorkerOutput(1);
  EXPECT_EQ(job.WaitWorker(0), 0) << job.WorkerOutput(0);
  EXPECT_EQ(job.WaitWorker(2), 0) << job.WorkerOutput(2);
  EXPECT_EQ(job.WaitServer(), 0) << job.ServerOutput();
  EXPECT_THAT(job.WorkerOutput(0), HasSubstr("(generation 3, 2 of 3 ranks)"));
  EXPECT_THAT(job.WorkerOutput(2), HasSubstr("Rank 2 took version "));
  EXPECT_EQ(job.Weights(0), job.Weights(2));
  // Every step had the full job's examples: only the sums' order differs.
  const float difference = MaxDifference(job.Weights(0), full);
  std::printf("largest weight difference from the full job: %g\n", difference);
  EXPECT_LT(difference, 1e-5f);
}

// A rank SIGKILLed and never replaced: the other two re-form without it
// once the settle time has passed, finish, and the server exits by itself.
TEST(ElasticTest, TheJobGoesOnWithoutALostRank) {
  const std::vector<float>& full = FullJobWeights();
  ASSERT_FALSE(full.empty());
  Job job(3);
  job.StartServer({});
  std::vector<std::string> rank0 = ElasticFlags(true, 0);
  rank0.back() = "--progress=lines";
  job.StartWorker(0, rank0);
  job.StartWorker(1, ElasticFlags(true, 1));
  job.StartWorker(2, ElasticFlags(true, 2));
  ASSERT_TRUE(job.WaitForWorkerLog(0, "6/26 [")) << job.WorkerOutput(0);
  job.Signal(job.worker(2), SIGKILL);
  job.WaitWorker(2);
  EXPECT_EQ(job.WaitWorker(0), 0) << job.WorkerOutput(0);
  EXPECT_EQ(job.WaitWorker(1), 0) << job.WorkerOutput(1);
  EXPECT_EQ(job.WaitServer(), 0) << job.ServerOutput();
  EXPECT_THAT(job.WorkerOutput(0), HasSubstr("(generation 2, 2 of 3 ranks)"));
  EXPECT_EQ(job.Weights(0), job.Weights(1));
  EXPECT_LT(MaxDifference(job.Weights(0), full), 1e-5f);
}

// Joiners whose --min_workers or model differ from the group's are refused
// (exit 2, naming the difference); the group is not disturbed.
TEST(ElasticTest, JoinersWithAnotherLayoutOrModelAreRefused) {
  Job job(3);
  StartTwoOfThree(job);
  if (::testing::Test::HasFatalFailure()) return;
  std::vector<std::string> odd = ElasticFlags(true, 2);
  odd.push_back("--min_workers=1");
  job.StartWorker(2, odd);
  EXPECT_EQ(job.WaitWorker(2), 2) << job.WorkerOutput(2);
  EXPECT_THAT(job.WorkerOutput(2), HasSubstr("--min_workers"));
  std::vector<std::string> other_model = ElasticFlags(true, 2);
  other_model.push_back("--layers=23,16,5");
  job.StartWorker(2, other_model);
  EXPECT_EQ(job.WaitWorker(2), 2) << job.WorkerOutput(2);
  EXPECT_THAT(job.WorkerOutput(2),
              HasSubstr("model differs from group \"lockstep\"'s: tensor 0"));
  EXPECT_EQ(job.WaitWorker(0), 0) << job.WorkerOutput(0);
  EXPECT_EQ(job.WaitWorker(1), 0) << job.WorkerOutput(1);
  EXPECT_EQ(job.WaitServer(), 0) << job.ServerOutput();
}


// Every rank leaves (SIGTERM) and comes back once, rank 0 last and for
// good: the server still counts ranks 1 and 2, back in the group, as in
// the job, so it does not end it as if every worker had left (it did,
// taking the coordinator with it, and the other two exited 75), and they
// finish it.
TEST(ElasticTest, RanksThatLeftAndCameBackStillCountAsInTheJob) {
  Job job(3);
  job.StartServer({});
  auto flags = [](int rank) {
    std::vector<std::string> f = ElasticFlags(true, rank);
    f.insert(f.end(), {"--max_steps=150", "--rejoin_timeout_s=15"});
    if (rank == 0) f.push_back("--progress=lines");
    return f;
  };
  for (int rank = 0; rank < 3; ++rank) job.StartWorker(rank, flags(rank));
  ASSERT_TRUE(job.WaitForWorkerLog(0, "3/26 [")) << job.WorkerOutput(0);
  // Ranks 1 and 2 leave in turn, each started again (slots 3 and 4).
  int64_t generation = 1;
  for (int rank : {1, 2}) {
    ASSERT_TRUE(job.WaitForStopHandler(rank));
    job.Signal(job.worker(rank), SIGTERM);
    ASSERT_EQ(job.WaitWorker(rank), 143) << job.WorkerOutput(rank);
    ASSERT_TRUE(job.WaitForWorkerLog(
        0, absl::StrCat("(generation ", ++generation, ", 2 of 3 ranks)")))
        << job.WorkerOutput(0);
    job.StartWorker(rank, flags(rank), rank + 2);
    ASSERT_TRUE(job.WaitForWorkerLog(
        0, absl::StrCat("(generation ", ++generation, ", 3 of 3 ranks)")))
        << job.WorkerOutput(0);
  }
  ASSERT_TRUE(job.WaitForStopHandler(0));
  job.Signal(job.worker(0), SIGTERM);
  EXPECT_EQ(job.WaitWorker(0), 143) << job.WorkerOutput(0);
  EXPECT_EQ(job.WaitWorker(3), 0) << job.WorkerOutput(3);
  EXPECT_EQ(job.WaitWorker(4), 0) << job.WorkerOutput(4);
  EXPECT_EQ(job.WaitServer(), 0) << job.ServerOutput();
  EXPECT_THAT(job.WorkerOutput(3), HasSubstr("2 of 3 ranks)"));
  EXPECT_EQ(job.Weights(3), job.Weights(4));
  EXPECT_FALSE(job.Weights(3).empty());
}

}  // namespace
}  // namespace lockstep
