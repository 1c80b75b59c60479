// Fault tests: real lockstep_server and lockstep_worker processes on
// loopback, killed, stopped and restarted with real signals. In every case
// nothing hangs, no partial step is applied, no step is applied twice, and
// where the scenario allows the final weights equal a fault-free run's
// exactly (two workers, whose sum does not depend on the order, or three
// summed in rank order).
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
#include "tests/fault/job.h"
#include "tests/integration/training_jobs.h"

namespace lockstep {
namespace {

using ::testing::HasSubstr;
using ::testing::Not;

// A run long enough to interrupt: 40 steps, rank 1 a little slow so that a
// signal lands mid-job.
const std::vector<std::string> kWorkerFlags = {
    "--dataset=synthetic", "--synthetic_examples=640", "--layers=23,17,5",
    "--optimizer=adam",    "--batch_size=8",           "--max_steps=40",
    "--epochs=3",          "--seed=11",                "--chunk_bytes=700",
    "--progress=none",     "--rejoin_timeout_s=60"};

std::vector<std::string> Flags(std::vector<std::string> extra = {}) {
  std::vector<std::string> flags = kWorkerFlags;
  flags.insert(flags.end(), extra.begin(), extra.end());
  return flags;
}

// The fault-free result, computed once.
const std::vector<float>& Reference() {
  static const std::vector<float>* reference = [] {
    Job job(2);
    job.StartServer({});
    job.StartWorker(0, Flags());
    job.StartWorker(1, Flags());
    EXPECT_EQ(job.WaitWorker(0), 0) << job.WorkerOutput(0);
    EXPECT_EQ(job.WaitWorker(1), 0) << job.WorkerOutput(1);
    EXPECT_EQ(job.WaitServer(), 0) << job.ServerOutput();
    return new std::vector<float>(job.Weights(0));
  }();
  return *reference;
}

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

// SSP (staleness 2): rank 1 killed, rank 0 runs two steps ahead and then
// waits for it. The step timeout notices the stall, and with
// --on_worker_loss=fail ends the job retryably, as in sync mode.
TEST(FaultTest, LostSspWorkerIsNoticedAndFailsTheJobWhenAsked) {
  Job job(2);
  job.StartServer({"--step_timeout_s=3", "--on_worker_loss=fail"});
  const std::vector<std::string> ssp = {"--sync=ssp", "--staleness=2"};
  job.StartWorker(0, Flags(ssp));
  std::vector<std::string> slow = ssp;
  slow.push_back("--straggle=1:50");
  job.StartWorker(1, Flags(slow));
  ASSERT_TRUE(job.WaitForVersion(10)) << job.ServerOutput();
  job.Signal(job.worker(1), SIGKILL);
  EXPECT_EQ(job.WaitServer(), 75) << job.ServerOutput();
  EXPECT_THAT(job.ServerOutput(), HasSubstr("timed out waiting for rank(s) 1"));
  EXPECT_EQ(job.WaitWorker(0), 75) << job.WorkerOutput(0);
  EXPECT_THAT(job.WorkerOutput(0), HasSubstr("the job failed"));
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

TEST(FaultTest, KilledServerRestartsFromItsCheckpoint) {
  Job job(2);
  const std::vector<std::string> server = {"--checkpoint_every_steps=5"};
  job.StartServer(server);
  job.StartWorker(0, Flags());
  job.StartWorker(1, Flags({"--straggle=1:50"}));
  ASSERT_TRUE(job.WaitForVersion(12)) << job.ServerOutput();
  job.Signal(job.server(), SIGKILL);
  job.StartServer(server);  // Same port, same checkpoint folder.
  EXPECT_EQ(job.WaitWorker(0), 0) << job.WorkerOutput(0);
  EXPECT_EQ(job.WaitWorker(1), 0) << job.WorkerOutput(1);
  EXPECT_EQ(job.WaitServer(), 0) << job.ServerOutput();
  EXPECT_THAT(job.ServerOutput(), HasSubstr("restored version"));
  EXPECT_THAT(job.WorkerOutput(0), HasSubstr("registering again"));
  EXPECT_EQ(job.Weights(0), Reference());
}

// A server that comes back with nothing (its checkpoint folder lost with
// its pod, say) must not be initialized again from the seed: the job would
// silently start over. The workers stop with exit 2 and say why.
TEST(FaultTest, ServerBackWithoutItsWeightsIsRefusedNotRestarted) {
  Job job(2);
  job.StartServer({});
  job.StartWorker(0, Flags());
  job.StartWorker(1, Flags({"--straggle=1:50"}));
  ASSERT_TRUE(job.WaitForVersion(8)) << job.ServerOutput();
  job.Signal(job.server(), SIGKILL);
  const std::string empty = MakeTempDir();
  job.StartServer({"--checkpoint_dir=" + empty});  // The last flag wins.
  for (int rank = 0; rank < 2; ++rank) {
    EXPECT_EQ(job.WaitWorker(rank), 2) << job.WorkerOutput(rank);
    EXPECT_THAT(job.WorkerOutput(rank),
                HasSubstr("a parameter server came back without the job's "
                          "weights"));
  }
  EXPECT_THAT(job.ServerOutput(), Not(HasSubstr("restored version")));
  job.Signal(job.server(), SIGTERM);
  EXPECT_EQ(job.WaitServer(), 0) << job.ServerOutput();
}

// In async mode a step is the worker's own count, not the server's
// version: a server restored from an older checkpoint answers lower
// versions than the worker's step, and the worker goes on.
TEST(FaultTest, AsyncWorkerGoesOnAfterTheServerRestoresAnOlderVersion) {
  Job job(1);
  const std::vector<std::string> server = {"--checkpoint_every_steps=5"};
  job.StartServer(server);
  job.StartWorker(0, Flags({"--sync=async", "--straggle=0:30"}));
  ASSERT_TRUE(job.WaitForVersion(12)) << job.ServerOutput();
  job.Signal(job.server(), SIGKILL);
  job.StartServer(server);
  EXPECT_EQ(job.WaitWorker(0), 0) << job.WorkerOutput(0);
  EXPECT_EQ(job.WaitServer(), 0) << job.ServerOutput();
  EXPECT_THAT(job.ServerOutput(), HasSubstr("restored version"));
  EXPECT_THAT(job.WorkerOutput(0), HasSubstr("registering again"));
}

// Two shards, one restored from an older checkpoint than the other holds
// in memory: their steps can no longer line up. A worker that registers
// says so and stops (exit 2) instead of a confusing refusal of its push.
TEST(FaultTest, ShardsAtVersionsTooFarApartAreNamed) {
  const std::string dir = MakeTempDir();
  const std::vector<std::string> keep = {"--exit_when_done=false"};
  Server shard0 = StartServer(1, dir, 0, 2, keep);
  const std::string ckpt = dir + "/ckpt1";
  const std::vector<std::string> saving = {
      "--exit_when_done=false", "--checkpoint_dir=" + ckpt,
      "--checkpoint_every_steps=5", "--checkpoints_to_keep=10"};
  Server shard1 = StartServer(1, dir, 1, 2, saving);
  auto worker = [&](int max_steps) {
    std::vector<std::string> argv = {
        kBin + "/lockstep_worker",
        "--servers=" + shard0.address + "," + shard1.address, "--workers=1",
        "--rank=0", absl::StrCat("--max_steps=", max_steps),
        // Steps slower than the server's 50 ms tick.
        "--straggle=0:100"};
    for (const std::string& f : Flags()) {
      if (f.rfind("--max_steps=", 0) != 0) argv.push_back(f);
    }
    return RunProcess(argv, {}, absl::Seconds(60));
  };
  RunResult first = worker(13);
  ASSERT_EQ(first.exit_code, 0) << first.output;
  shard1.process.Kill();  // No last checkpoint.
  // Keep only the oldest checkpoint, whenever the server's tick took it
  // (version 5 when on time): the shards end up that far apart.
  std::vector<std::string> files;
  const std::string shard_dir = ckpt + "/shard-1-of-2";
  if (DIR* d = opendir(shard_dir.c_str())) {
    while (dirent* e = readdir(d)) {
      if (absl::StartsWith(e->d_name, "ckpt-")) {
        files.push_back(shard_dir + "/" + e->d_name);
      }
    }
    closedir(d);
  }
  std::sort(files.begin(), files.end());
  ASSERT_FALSE(files.empty());
  for (size_t i = 1; i < files.size(); ++i) unlink(files[i].c_str());
  const int64_t oldest =
      std::stoll(files[0].substr(files[0].rfind("ckpt-") + 5, 12));
  ASSERT_LE(oldest, 11) << "no checkpoint two steps before the last";
  Subprocess restarted = Subprocess::Start(
      {kBin + "/lockstep_server", "--listen=" + shard1.address, "--workers=1",
       "--shard=1", "--num_shards=2", "--exit_when_done=false",
       "--checkpoint_dir=" + dir + "/ckpt1"});
  RunResult second = worker(13);
  EXPECT_EQ(second.exit_code, 2) << second.output;
  EXPECT_THAT(second.output,
              HasSubstr(absl::StrCat(
                  "the parameter-server shards are at versions ", oldest,
                  " to 13: a shard restarted from an older checkpoint")))
      << restarted.Output();
  restarted.Kill();
  shard0.process.Kill();
}

// ResNet-20 (on 8x8 images) carries batch-norm statistics after its
// parameters: a server restarted from its checkpoint must give the
// fault-free weights and statistics, bit for bit, as for the MLP.
TEST(FaultTest, KilledServerRestartsWithBatchNormStateFromItsCheckpoint) {
  const std::vector<std::string> resnet = {
      "--model=resnet20",         "--input_shape=8,8,3",  "--dataset=synthetic",
      "--synthetic_examples=256", "--optimizer=adam",     "--batch_size=8",
      "--max_steps=30",           "--epochs=3",           "--seed=5",
      "--progress=none",          "--rejoin_timeout_s=60"};
  auto with = [&](std::vector<std::string> extra) {
    extra.insert(extra.begin(), resnet.begin(), resnet.end());
    return extra;
  };
  Job reference(2);
  reference.StartServer({});
  reference.StartWorker(0, resnet);
  reference.StartWorker(1, resnet);
  ASSERT_EQ(reference.WaitWorker(0), 0) << reference.WorkerOutput(0);
  ASSERT_EQ(reference.WaitWorker(1), 0) << reference.WorkerOutput(1);
  ASSERT_EQ(reference.WaitServer(), 0) << reference.ServerOutput();

  Job job(2);
  const std::vector<std::string> server = {"--checkpoint_every_steps=5"};
  job.StartServer(server);
  job.StartWorker(0, resnet);
  job.StartWorker(1, with({"--straggle=1:50"}));
  ASSERT_TRUE(job.WaitForVersion(12)) << job.ServerOutput();
  job.Signal(job.server(), SIGKILL);
  job.StartServer(server);
  EXPECT_EQ(job.WaitWorker(0), 0) << job.WorkerOutput(0);
  EXPECT_EQ(job.WaitWorker(1), 0) << job.WorkerOutput(1);
  EXPECT_EQ(job.WaitServer(), 0) << job.ServerOutput();
  EXPECT_THAT(job.ServerOutput(), HasSubstr("restored version"));
  const std::vector<float> want = reference.Weights(0);
  ASSERT_FALSE(want.empty());
  EXPECT_EQ(job.Weights(0), want);
  EXPECT_EQ(job.Weights(1), want);
}

TEST(FaultTest, ServerKilledWhileWritingACheckpointRestoresThePreviousOne) {
  Job job(2);
  job.StartServer({"--checkpoint_every_steps=5"});
  job.StartWorker(0, Flags());
  job.StartWorker(1, Flags({"--straggle=1:50"}));
  ASSERT_TRUE(job.WaitForCheckpointFile()) << job.ServerOutput();
  // Restart with writes that stall before their rename, and kill the server
  // inside the next write. A temporary file the first kill may have left
  // goes first (a start leaves recent ones alone), so that the one waited
  // for is the second server's own, stalled write.
  job.Signal(job.server(), SIGKILL);
  job.WaitServer();
  std::vector<std::string> stale;
  if (DIR* d = opendir(job.CheckpointDir().c_str())) {
    while (dirent* e = readdir(d)) {
      if (absl::EndsWith(e->d_name, ".tmp")) {
        stale.push_back(job.CheckpointDir() + "/" + e->d_name);
      }
    }
    closedir(d);
  }
  for (const std::string& path : stale) unlink(path.c_str());
  job.StartServer(
      {"--checkpoint_every_steps=5", "--testing_checkpoint_pause_ms=600000"});
  ASSERT_TRUE(job.WaitForServerLog("restored version")) << job.ServerOutput();
  ASSERT_TRUE(job.WaitForCheckpointTmp()) << job.ServerOutput();
  // The first server's files (this one completes none): it restored the
  // newest.
  const std::vector<std::string> complete = job.CheckpointFiles();
  ASSERT_FALSE(complete.empty());
  job.Signal(job.server(), SIGKILL);
  job.StartServer({"--checkpoint_every_steps=5"});
  EXPECT_EQ(job.WaitWorker(0), 0) << job.WorkerOutput(0);
  EXPECT_EQ(job.WaitWorker(1), 0) << job.WorkerOutput(1);
  EXPECT_EQ(job.WaitServer(), 0) << job.ServerOutput();
  // The third start restored the complete checkpoint, as the second did,
  // and ignored the half-written one.
  const size_t name = complete.back().rfind("ckpt-") + 5;
  const std::string restored =
      absl::StrCat("restored version ",
                   std::stoll(complete.back().substr(name, 12)), " from");
  const std::string log = job.ServerOutput();
  const size_t first = log.find(restored);
  ASSERT_NE(first, std::string::npos) << log;
  EXPECT_NE(log.find(restored, first + 1), std::string::npos) << log;
  EXPECT_EQ(job.Weights(0), Reference());
}

// A checkpoint written for another job layout (here 2 workers) is not
// restored into this one (3): the server stops with the permanent code and
// says why, rather than start the job over or mix the two.
TEST(FaultTest, ACheckpointOfAnotherLayoutStopsTheServer) {
  Job job(2);
  job.StartServer({"--checkpoint_every_steps=5"});
  job.StartWorker(0, Flags());
  job.StartWorker(1, Flags());
  ASSERT_EQ(job.WaitWorker(0), 0) << job.WorkerOutput(0);
  ASSERT_EQ(job.WaitWorker(1), 0) << job.WorkerOutput(1);
  ASSERT_EQ(job.WaitServer(), 0) << job.ServerOutput();
  ASSERT_FALSE(job.CheckpointFiles().empty());
  job.StartServer({"--workers=3"});
  EXPECT_EQ(job.WaitServer(), 2) << job.ServerOutput();
  EXPECT_THAT(job.ServerOutput(), HasSubstr("cannot restore the checkpoint"));
}

// --checkpoint_every_seconds alone takes checkpoints while the job runs
// (about 3 s of steps here, a checkpoint a second).
TEST(FaultTest, CheckpointsByTheClock) {
  Job job(1);
  job.StartServer({"--checkpoint_every_seconds=1", "--checkpoints_to_keep=10",
                   "--exit_when_done=false"});
  job.StartWorker(0, Flags({"--max_steps=120", "--straggle=0:25"}));
  ASSERT_EQ(job.WaitWorker(0), 0) << job.WorkerOutput(0);
  // Taken while the job ran: at least two before its end (version 120).
  int before_the_end = 0;
  for (const std::string& f : job.CheckpointFiles()) {
    before_the_end += !absl::StrContains(f, "ckpt-000000000120");
  }
  EXPECT_GE(before_the_end, 2) << job.ServerOutput();
  job.Signal(job.server(), SIGTERM);
  EXPECT_EQ(job.WaitServer(), 0) << job.ServerOutput();
}

// A worker stuck in a step (its server stopped) that gets a stop signal
// waits for the step; a second one at least 2 s later (someone pressing
// Ctrl-C again) makes it exit at once.
TEST(FaultTest, ASecondStopSignalLaterExitsAtOnce) {
  Job job(1);
  job.StartServer({});
  job.StartWorker(0, Flags({"--straggle=0:50", "--step_timeout_s=600"}));
  ASSERT_TRUE(job.WaitForVersion(3)) << job.ServerOutput();
  job.Signal(job.server(), SIGSTOP);
  job.Signal(job.worker(0), SIGTERM);
  ASSERT_TRUE(job.WaitForWorkerLog(0, "stop signal received"));
  absl::SleepFor(absl::Milliseconds(2100));  // The rule's 2 s, not a wait.
  job.Signal(job.worker(0), SIGTERM);
  EXPECT_EQ(job.WaitWorker(0), 143) << job.WorkerOutput(0);
  EXPECT_THAT(job.WorkerOutput(0), Not(HasSubstr("Left the job")));
  job.Signal(job.server(), SIGCONT);
  job.Signal(job.server(), SIGKILL);
  job.WaitServer();
}

// A checkpoint that fails (here its folder was replaced by a file) is tried
// again after 5 s, doubling, not on every 50 ms tick: each try snapshots and
// encodes the whole shard. The final one failing is the server's failure.
TEST(FaultTest, FailingCheckpointsAreRetriedWithBackoff) {
  Job job(1);
  job.StartServer({"--checkpoint_every_steps=1"});
  job.StartWorker(0, Flags({"--max_steps=120", "--straggle=0:20"}));
  ASSERT_TRUE(job.WaitForCheckpointFile()) << job.ServerOutput();
  const std::string dir = job.CheckpointDir();
  ASSERT_EQ(rename(dir.c_str(), (dir + ".moved").c_str()), 0);
  FILE* in_the_way = std::fopen(dir.c_str(), "w");
  ASSERT_NE(in_the_way, nullptr);
  std::fclose(in_the_way);
  const absl::Time broken = absl::Now();
  EXPECT_EQ(job.WaitWorker(0), 0) << job.WorkerOutput(0);
  const absl::Duration failing = absl::Now() - broken;
  EXPECT_EQ(job.WaitServer(), 1) << job.ServerOutput();
  const std::string log = job.ServerOutput();
  EXPECT_THAT(log, HasSubstr("checkpoint failed: UNAVAILABLE: cannot create"));
  EXPECT_THAT(log, HasSubstr("; next try in 5s"));
  EXPECT_THAT(log, HasSubstr("final checkpoint failed"));
  int periodic = 0;
  for (size_t at = 0; (at = log.find("\nlockstep_server: checkpoint failed",
                                     at)) != std::string::npos;
       ++at) {
    ++periodic;
  }
  // The first try, then one every 5 s or more (about 2 s of steps here),
  // where every 50 ms tick used to try (about 40).
  EXPECT_GE(periodic, 1);
  EXPECT_LE(periodic, 2 + absl::ToInt64Seconds(failing) / 5) << log;
}

TEST(FaultTest, CorruptAndTruncatedCheckpointsFallBack) {
  Job job(2);
  job.StartServer({"--checkpoint_every_steps=10", "--checkpoints_to_keep=5"});
  job.StartWorker(0, Flags());
  job.StartWorker(1, Flags({"--straggle=1:30"}));
  ASSERT_EQ(job.WaitWorker(0), 0) << job.WorkerOutput(0);
  ASSERT_EQ(job.WaitWorker(1), 0);
  ASSERT_EQ(job.WaitServer(), 0);
  std::vector<std::string> files = job.CheckpointFiles();
  ASSERT_GE(files.size(), 3u) << job.ServerOutput();
  job.CorruptByte(files[files.size() - 1]);
  job.Truncate(files[files.size() - 2]);
  const std::string expected = files[files.size() - 3];
  const std::vector<std::string> bad = {files[files.size() - 1],
                                        files[files.size() - 2]};
  job.StartServer({});
  job.StartWorker(0, Flags());
  job.StartWorker(1, Flags());
  EXPECT_EQ(job.WaitWorker(0), 0) << job.WorkerOutput(0);
  EXPECT_EQ(job.WaitWorker(1), 0);
  EXPECT_EQ(job.WaitServer(), 0);
  EXPECT_THAT(job.ServerOutput(), HasSubstr("checksum mismatch"));
  EXPECT_THAT(job.ServerOutput(), HasSubstr("truncated"));
  EXPECT_THAT(job.ServerOutput(), HasSubstr("falling back"));
  const size_t name = expected.rfind("ckpt-") + 5;
  EXPECT_THAT(
      job.ServerOutput(),
      HasSubstr(absl::StrCat("restored version ",
                             std::stoll(expected.substr(name, 12)), " from")));
  EXPECT_EQ(job.Weights(0), Reference());
  // Set aside, so that pruning counts only good ones (with one kept, a
  // newer corrupt file would otherwise outlive every good one).
  for (const std::string& path : bad) {
    EXPECT_EQ(access((path + ".corrupt").c_str(), F_OK), 0) << path;
    EXPECT_THAT(job.ServerOutput(), HasSubstr("set aside as " + path));
  }
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

// All-reduce: one rank told to stop. Its peers learn it with that step's
// sum and every rank stops after the same step, instead of the others
// waiting in a step it will not take until --step_timeout_s (exit 75).
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
  ASSERT_TRUE(job.WaitForWorkerLog(0, "/26 - loss")) << job.WorkerOutput(0);
}

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
    ASSERT_TRUE(job.WaitForWorkerLog(0, " 10/40 ")) << job.WorkerOutput(0);
    job.Signal(job.server(), SIGTERM);
    job.Signal(job.worker(0), SIGTERM);
    job.Signal(job.worker(1), SIGTERM);
    // 143 is also what a worker killed by the signal itself would give: the
    // log says it stopped on purpose.
    for (int r = 0; r < 2; ++r) {
      EXPECT_EQ(job.WaitWorker(r), 143) << job.WorkerOutput(r);
      EXPECT_THAT(job.WorkerOutput(r), HasSubstr("stop signal received"));
      EXPECT_THAT(job.WorkerOutput(r), Not(HasSubstr(" 40/40 ")));
    }
    EXPECT_EQ(job.WaitServer(), 0) << job.ServerOutput();
  }
}

}  // namespace
}  // namespace lockstep
