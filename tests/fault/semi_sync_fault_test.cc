// Semi-synchronous jobs (--sync=diloco, docs/architecture.md "Sync modes")
// under the synchronous mode's faults: a server killed and restarted from
// its checkpoint, a worker killed and replaced. A round is one
// synchronous step of the servers, so each worker's change counts exactly
// once and the job ends with the fault-free weights to the bit. The inner
// optimizer here is plain SGD: its state (none) cannot differ between a
// replayed round and the fault-free one (docs/faults.md says what a
// stateful inner optimizer changes).
#include <signal.h>

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

}  // namespace
}  // namespace lockstep
