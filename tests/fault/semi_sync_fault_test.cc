// Semi-synchronous jobs (--sync=diloco, docs/architecture.md "Sync modes")
// under the synchronous mode's faults: a server killed and restarted from
// its checkpoint, a worker killed and replaced. A round is one
// synchronous step of the servers, so each worker's change counts exactly
// once and the job ends with the fault-free weights to the bit. The inner
// optimizer here is plain SGD: its state (none) cannot differ between a
// replayed round and the fault-free one (docs/faults.md says what a
// stateful inner optimizer changes).
#include <signal.h>

#include <algorithm>
#include <cmath>
#include <cstdio>
#include <string>
#include <vector>

#include "common/base/env.h"
#include "gmock/gmock.h"
#include "gtest/gtest.h"
#include "tests/fault/fault_flags.h"
#include "tests/fault/job.h"

namespace lockstep {
namespace {

using ::testing::HasSubstr;
using ::testing::Not;

// 40 local steps in rounds of 4 (10 versions); rank 1 a little slow.
std::vector<std::string> DiLoCoFlags(int rank) {
  std::vector<std::string> extra = {"--sync=diloco", "--local_steps=4",
                                    "--optimizer=sgd", "--lr=0.05"};
  if (rank == 1) extra.push_back("--straggle=1:40");
  return Flags(extra);
}

const std::vector<float>& DiLoCoReference() {
  static const std::vector<float>* reference =
      new std::vector<float>(FaultFreeWeights(2, {}, DiLoCoFlags));
  return *reference;
}

TEST(SemiSyncFaultTest, KilledServerRestartsFromItsCheckpoint) {
  ASSERT_FALSE(DiLoCoReference().empty());
  Job job(2);
  const std::vector<std::string> server = {"--checkpoint_every_steps=2"};
  job.StartServer(server);
  for (int r = 0; r < 2; ++r) job.StartWorker(r, DiLoCoFlags(r));
  ASSERT_TRUE(job.WaitForVersion(5)) << job.ServerOutput();
  job.Signal(job.server(), SIGKILL);
  job.StartServer(server);  // Same port, same checkpoint folder.
  EXPECT_EQ(job.WaitWorker(0), 0) << job.WorkerOutput(0);
  EXPECT_EQ(job.WaitWorker(1), 0) << job.WorkerOutput(1);
  EXPECT_EQ(job.WaitServer(), 0) << job.ServerOutput();
  EXPECT_THAT(job.ServerOutput(), HasSubstr("restored version"));
  // Versions count rounds: 40 local steps in rounds of 4.
  EXPECT_THAT(job.ServerOutput(), HasSubstr("final version 10 "));
  EXPECT_EQ(job.Weights(0), DiLoCoReference());
  EXPECT_EQ(job.Weights(1), DiLoCoReference());
}

TEST(SemiSyncFaultTest, KilledWorkerIsReplacedAndTheResultIsUnchanged) {
  ASSERT_FALSE(DiLoCoReference().empty());
  Job job(2);
  job.StartServer({"--step_timeout_s=2", "--on_worker_loss=wait"});
  for (int r = 0; r < 2; ++r) job.StartWorker(r, DiLoCoFlags(r));
  ASSERT_TRUE(job.WaitForVersion(4)) << job.ServerOutput();
  job.Signal(job.worker(1), SIGKILL);
  job.StartWorker(1, DiLoCoFlags(1));  // The replacement, same rank.
  EXPECT_EQ(job.WaitWorker(0), 0) << job.WorkerOutput(0);
  EXPECT_EQ(job.WaitWorker(1), 0) << job.WorkerOutput(1);
  EXPECT_EQ(job.WaitServer(), 0) << job.ServerOutput();
  EXPECT_EQ(job.Weights(0), DiLoCoReference());
  EXPECT_EQ(job.Weights(1), DiLoCoReference());
}

// Adam as the inner optimizer: its moments are each worker's own, not in
// the servers' checkpoints. With --inner_state_dir a worker saves them
// before each round's push, for the version that round makes.
std::vector<std::string> AdamDiLoCoFlags(int rank, const std::string& dir) {
  std::vector<std::string> flags = DiLoCoFlags(rank);
  flags.push_back("--optimizer=adam");
  flags.push_back("--lr=0.01");
  if (!dir.empty()) flags.push_back("--inner_state_dir=" + dir);
  return flags;
}

// The fault-free run saves nothing: the folder changes no result.
const std::vector<float>& AdamDiLoCoReference() {
  static const std::vector<float>* reference = new std::vector<float>(
      FaultFreeWeights(2, {}, [](int r) { return AdamDiLoCoFlags(r, ""); }));
  return *reference;
}

// A replacement takes the moments saved for the version it joins at: the
// job ends with the fault-free weights to the bit (without the folder the
// replacement's fresh moments move them: docs/faults.md).
TEST(SemiSyncFaultTest, AReplacedWorkerGoesOnWithItsSavedInnerState) {
  ASSERT_FALSE(AdamDiLoCoReference().empty());
  Job job(2);
  const std::string dir = job.dir() + "/inner";
  job.StartServer({"--step_timeout_s=2", "--on_worker_loss=wait"});
  for (int r = 0; r < 2; ++r) job.StartWorker(r, AdamDiLoCoFlags(r, dir));
  ASSERT_TRUE(job.WaitForVersion(4)) << job.ServerOutput();
  job.Signal(job.worker(1), SIGKILL);
  job.StartWorker(1, AdamDiLoCoFlags(1, dir));
  EXPECT_EQ(job.WaitWorker(0), 0) << job.WorkerOutput(0);
  EXPECT_EQ(job.WaitWorker(1), 0) << job.WorkerOutput(1);
  EXPECT_EQ(job.WaitServer(), 0) << job.ServerOutput();
  EXPECT_THAT(job.WorkerOutput(1),
              HasSubstr("the inner optimizer's state for version "));
  EXPECT_EQ(job.Weights(0), AdamDiLoCoReference());
  EXPECT_EQ(job.Weights(1), AdamDiLoCoReference());
  // Each rank keeps its newest 3: versions 8, 9 and 10 of 10.
  for (int r = 0; r < 2; ++r) {
    for (int v = 7; v <= 10; ++v) {
      const std::string path = dir + "/inner-rank" + std::to_string(r) + "-v" +
                               std::to_string(v) + ".safetensors";
      EXPECT_EQ(Env::Default()->Stat(path).ok(), v >= 8) << path;
    }
  }
}

// The servers stepped back to their checkpoint (every 2 rounds): the live
// workers start the rounds again, each from the moments it saved for the
// version it finds (or, for the round under way, those it began it with).
TEST(SemiSyncFaultTest, RoundsRedoneAfterAServerRestartUseTheirInnerState) {
  ASSERT_FALSE(AdamDiLoCoReference().empty());
  Job job(2);
  const std::string dir = job.dir() + "/inner";
  const std::vector<std::string> server = {"--checkpoint_every_steps=2"};
  job.StartServer(server);
  for (int r = 0; r < 2; ++r) job.StartWorker(r, AdamDiLoCoFlags(r, dir));
  ASSERT_TRUE(job.WaitForVersion(5)) << job.ServerOutput();
  job.Signal(job.server(), SIGKILL);
  job.StartServer(server);
  EXPECT_EQ(job.WaitWorker(0), 0) << job.WorkerOutput(0);
  EXPECT_EQ(job.WaitWorker(1), 0) << job.WorkerOutput(1);
  EXPECT_EQ(job.WaitServer(), 0) << job.ServerOutput();
  EXPECT_THAT(job.ServerOutput(), HasSubstr("restored version"));
  EXPECT_EQ(job.Weights(0), AdamDiLoCoReference());
  EXPECT_EQ(job.Weights(1), AdamDiLoCoReference());
}

// --step_timeout_s bounds a push's wait for the others, not a round: a
// round of 4 steps of 300 ms each is longer than the 1 s timeout, and its
// pushes must still go through (no deadline already past, no rejoin).
TEST(SemiSyncFaultTest, ARoundLongerThanTheStepTimeoutIsNotCutShort) {
  Job job(2);
  job.StartServer({});
  for (int r = 0; r < 2; ++r) {
    job.StartWorker(r,
                    Flags({"--sync=diloco", "--local_steps=4", "--max_steps=8",
                           "--step_timeout_s=1", "--straggle=0:300,1:300"}));
  }
  for (int r = 0; r < 2; ++r) {
    EXPECT_EQ(job.WaitWorker(r), 0) << job.WorkerOutput(r);
    EXPECT_THAT(job.WorkerOutput(r), Not(HasSubstr("registering again")));
  }
  EXPECT_EQ(job.WaitServer(), 0) << job.ServerOutput();
  EXPECT_THAT(job.ServerOutput(), HasSubstr("final version 2 "));
}

// Elastic rounds (--min_workers below --workers): a member covering an
// absent rank trains on both ranks' batches, summed as one batch, and
// pushes its change for both shards. With rank 0 alone of 2 under
// LocalSGD, each local step is then a synchronous 2-worker step of the
// same SGD, and each version rank 0's own weights: the job must end where
// a synchronous 2-worker job ends. Not to the bit: the servers take the
// version minus rank 0's change, which rounds where a weight's round
// moved it by more than half its size.
TEST(SemiSyncFaultTest, AnElasticMemberCoveringAnAbsentRankTrainsOnItsBatches) {
  auto flags = [](const std::string& sync) {
    std::vector<std::string> extra = {"--sync=" + sync, "--optimizer=sgd",
                                      "--lr=0.05"};
    if (sync == "localsgd") {
      extra.insert(extra.end(), {"--local_steps=4", "--min_workers=1",
                                 "--group_settle_ms=200"});
    }
    return Flags(extra);
  };
  const std::vector<float> synchronous =
      FaultFreeWeights(2, {}, [&](int) { return flags("ps"); });
  ASSERT_FALSE(synchronous.empty());
  Job job(2);
  job.StartServer({});
  job.StartWorker(0, flags("localsgd"));
  EXPECT_EQ(job.WaitWorker(0), 0) << job.WorkerOutput(0);
  EXPECT_EQ(job.WaitServer(), 0) << job.ServerOutput();
  EXPECT_THAT(job.WorkerOutput(0),
              HasSubstr("(generation 1, 1 of 2 ranks), pushing batch "
                        "shard(s) 0, 1"));
  EXPECT_THAT(job.ServerOutput(), HasSubstr("final version 10 "));
  const std::vector<float> elastic = job.Weights(0);
  ASSERT_EQ(elastic.size(), synchronous.size());
  float largest = 0;
  for (size_t i = 0; i < elastic.size(); ++i) {
    largest = std::max(largest, std::abs(elastic[i] - synchronous[i]));
  }
  std::printf("largest difference from the synchronous job: %g\n", largest);
  EXPECT_LE(largest, 1e-6);
}

// 3 ranks in rounds of 4 (60 local steps, 15 versions): ranks 0 and 1
// start without rank 2 (rank 0 covering its batches), rank 2 joins, then
// rank 1 is told to stop and leaves; each regroup starts the round under
// way again, and the members go on to the job's last version.
TEST(SemiSyncFaultTest, ElasticRoundsTakeAJoinerAndALeaver) {
  auto flags = [](int rank) {
    std::vector<std::string> extra = {
        "--sync=diloco",   "--local_steps=4",       "--max_steps=60",
        "--min_workers=2", "--group_settle_ms=300", "--optimizer=sgd",
        "--lr=0.05",       "--straggle=0:60"};
    if (rank == 0) extra.push_back("--progress=lines");
    return Flags(extra);
  };
  Job job(3);
  job.StartServer({"--step_timeout_s=2"});
  job.StartWorker(0, flags(0));
  job.StartWorker(1, flags(1));
  ASSERT_TRUE(job.WaitForWorkerLog(
      0, "(generation 1, 2 of 3 ranks), pushing batch shard(s) 0, 2"))
      << job.WorkerOutput(0);
  ASSERT_TRUE(job.WaitForVersion(3)) << job.ServerOutput();
  job.StartWorker(2, flags(2));
  ASSERT_TRUE(job.WaitForWorkerLog(
      0, "(generation 2, 3 of 3 ranks), pushing batch shard(s) 0\n"))
      << job.WorkerOutput(0);
  ASSERT_TRUE(job.WaitForVersion(8)) << job.ServerOutput();
  job.Signal(job.worker(1), SIGTERM);
  EXPECT_EQ(job.WaitWorker(1), 143) << job.WorkerOutput(1);
  EXPECT_EQ(job.WaitWorker(0), 0) << job.WorkerOutput(0);
  EXPECT_EQ(job.WaitWorker(2), 0) << job.WorkerOutput(2);
  EXPECT_EQ(job.WaitServer(), 0) << job.ServerOutput();
  EXPECT_THAT(job.WorkerOutput(0),
              HasSubstr("(generation 3, 2 of 3 ranks), pushing batch "
                        "shard(s) 0, 1"));
  EXPECT_THAT(job.ServerOutput(), HasSubstr("final version 15 "));
  const std::vector<float> weights = job.Weights(0);
  ASSERT_FALSE(weights.empty());
  EXPECT_EQ(job.Weights(2), weights);
  for (float w : weights) ASSERT_TRUE(std::isfinite(w));
}

// A joiner alone is as many as --min_workers, and a round (4 steps of
// 500 ms) outlasts the settle time and the joiner's connect timeout (1 s):
// the joiner must wait for the members to come back at their round's end.
// Before, it formed a group of its own once the settle time had passed,
// which refused the members' pushes; they formed another without it, which
// refused its push, and so on (a 40-step job took 52 s and 171 local
// steps); and with the quorum alone it gave up after its connect timeout
// (exit 75), having cost the members their round.
TEST(SemiSyncFaultTest, AJoinerWaitsForTheMembersRoundToEnd) {
  auto flags = [](int rank) {
    std::vector<std::string> extra = {
        "--sync=localsgd",       "--local_steps=4",
        "--max_steps=12",        "--min_workers=1",
        "--group_settle_ms=200", "--optimizer=sgd",
        "--connect_timeout_s=1", "--lr=0.05",
        "--straggle=0:500"};
    if (rank == 0) extra.push_back("--progress=lines");
    return Flags(extra);
  };
  Job job(2);
  job.StartServer({});
  job.StartWorker(0, flags(0));
  ASSERT_TRUE(job.WaitForWorkerLog(
      0, "(generation 1, 1 of 2 ranks), pushing batch shard(s) 0, 1"))
      << job.WorkerOutput(0);
  ASSERT_TRUE(job.WaitForVersion(1)) << job.ServerOutput();
  job.StartWorker(1, flags(1));
  EXPECT_EQ(job.WaitWorker(0), 0) << job.WorkerOutput(0);
  EXPECT_EQ(job.WaitWorker(1), 0) << job.WorkerOutput(1);
  EXPECT_EQ(job.WaitServer(), 0) << job.ServerOutput();
  EXPECT_THAT(job.WorkerOutput(0),
              HasSubstr("(generation 2, 2 of 2 ranks), pushing batch "
                        "shard(s) 0\n"));
  EXPECT_THAT(job.WorkerOutput(0), Not(HasSubstr("generation 3")));
  EXPECT_THAT(job.WorkerOutput(1), Not(HasSubstr("1 of 2 ranks")));
  EXPECT_THAT(job.ServerOutput(), HasSubstr("final version 3 "));
}

}  // namespace
}  // namespace lockstep
