// Elastic parameter-server jobs (--sync=ps, --min_workers below --workers)
// with real processes: workers join and leave at step boundaries and a
// lost one is left behind, while the members cover the absent ranks' batch
// shards. The server sums shards in rank order (--sum_order=rank) and a
// shard's gradient is the same whoever computes it, so the weights are
// exactly those of a job that had every worker throughout.
#include <signal.h>

#include <string>
#include <vector>

#include "gmock/gmock.h"
#include "gtest/gtest.h"
#include "tests/fault/fault_flags.h"
#include "tests/fault/job.h"

namespace lockstep {
namespace {

using ::testing::HasSubstr;
using ::testing::Not;

// The server's flags: shards summed in rank order, a lost worker's step
// given up after 2 s.
const std::vector<std::string> kServerFlags = {"--sum_order=rank",
                                               "--step_timeout_s=2"};

// Flags() for 3 workers (26 steps an epoch), 60 steps, rank 0 paced at
// 100 ms a step; `elastic` adds --min_workers=2.
std::vector<std::string> ElasticFlags(bool elastic, int rank) {
  std::vector<std::string> flags =
      Flags({"--sync=ps", "--max_steps=60", "--straggle=0:100"});
  if (elastic) {
    flags.insert(flags.end(), {"--min_workers=2", "--group_settle_ms=300"});
  }
  if (rank == 0) flags.push_back("--progress=lines");
  return flags;
}

// The weights of the same job with every worker throughout, computed once.
const std::vector<float>& FullJobWeights() {
  static const std::vector<float>* full =
      new std::vector<float>(FaultFreeWeights(
          3, kServerFlags, [](int r) { return ElasticFlags(false, r); }));
  return *full;
}

// Ranks 0 and 1 start alone (2 of 3, covering rank 2's shard), rank 2
// joins mid-job, then rank 1 is told to stop and leaves (143) while the
// other two go on, covering its shard, and finish.
TEST(ElasticPsTest, AJoinerComesInAndALeaverGoes) {
  const std::vector<float>& full = FullJobWeights();
  ASSERT_FALSE(full.empty());
  Job job(3);
  job.StartServer(kServerFlags);
  job.StartWorker(0, ElasticFlags(true, 0));
  job.StartWorker(1, ElasticFlags(true, 1));
  ASSERT_TRUE(job.WaitForWorkerLog(
      0, "(generation 1, 2 of 3 ranks), pushing batch shard(s) 0, 2"))
      << job.WorkerOutput(0);
  ASSERT_TRUE(job.WaitForWorkerLog(0, "6/26 [")) << job.WorkerOutput(0);
  job.StartWorker(2, ElasticFlags(true, 2));
  ASSERT_TRUE(job.WaitForWorkerLog(
      0, "(generation 2, 3 of 3 ranks), pushing batch shard(s) 0\n"))
      << job.WorkerOutput(0);
  ASSERT_TRUE(job.WaitForWorkerLog(0, "Epoch 2/3")) << job.WorkerOutput(0);
  job.Signal(job.worker(1), SIGTERM);
  EXPECT_EQ(job.WaitWorker(1), 143) << job.WorkerOutput(1);
  EXPECT_EQ(job.WaitWorker(0), 0) << job.WorkerOutput(0);
  EXPECT_EQ(job.WaitWorker(2), 0) << job.WorkerOutput(2);
  EXPECT_EQ(job.WaitServer(), 0) << job.ServerOutput();
  EXPECT_THAT(job.WorkerOutput(0),
              HasSubstr("(generation 3, 2 of 3 ranks), pushing batch "
                        "shard(s) 0, 1"));
  EXPECT_EQ(job.Weights(0), full);
  EXPECT_EQ(job.Weights(2), full);
}

// A worker SIGKILLed and never replaced: the server gives its step up
// after the step timeout, the other two re-form without it once the
// settle time has passed, finish, and the server exits by itself.
TEST(ElasticPsTest, TheJobGoesOnWithoutALostWorker) {
  const std::vector<float>& full = FullJobWeights();
  ASSERT_FALSE(full.empty());
  Job job(3);
  job.StartServer(kServerFlags);
  for (int r = 0; r < 3; ++r) job.StartWorker(r, ElasticFlags(true, r));
  ASSERT_TRUE(job.WaitForWorkerLog(0, "6/26 [")) << job.WorkerOutput(0);
  job.Signal(job.worker(2), SIGKILL);
  job.WaitWorker(2);
  EXPECT_EQ(job.WaitWorker(0), 0) << job.WorkerOutput(0);
  EXPECT_EQ(job.WaitWorker(1), 0) << job.WorkerOutput(1);
  EXPECT_EQ(job.WaitServer(), 0) << job.ServerOutput();
  EXPECT_THAT(job.WorkerOutput(0),
              HasSubstr("(generation 2, 2 of 3 ranks), pushing batch "
                        "shard(s) 0, 2"));
  EXPECT_EQ(job.Weights(0), full);
  EXPECT_EQ(job.Weights(1), full);
}

// A joiner whose model differs from the job's is refused (exit 2, naming
// the difference); the group is not disturbed.
TEST(ElasticPsTest, AJoinerWithAnotherModelIsRefused) {
  Job job(3);
  job.StartServer(kServerFlags);
  job.StartWorker(0, ElasticFlags(true, 0));
  job.StartWorker(1, ElasticFlags(true, 1));
  ASSERT_TRUE(job.WaitForWorkerLog(0, "(generation 1, 2 of 3 ranks)"))
      << job.WorkerOutput(0);
  std::vector<std::string> other_model = ElasticFlags(true, 2);
  other_model.push_back("--layers=23,16,5");
  job.StartWorker(2, other_model);
  EXPECT_EQ(job.WaitWorker(2), 2) << job.WorkerOutput(2);
  EXPECT_THAT(job.WorkerOutput(2), HasSubstr("tensor 0"));
  EXPECT_EQ(job.WaitWorker(0), 0) << job.WorkerOutput(0);
  EXPECT_EQ(job.WaitWorker(1), 0) << job.WorkerOutput(1);
  EXPECT_EQ(job.WaitServer(), 0) << job.ServerOutput();
  EXPECT_THAT(job.WorkerOutput(0), Not(HasSubstr("generation 2")));
}

}  // namespace
}  // namespace lockstep
