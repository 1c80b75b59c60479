// Fault tests (see fault_test.cc) of servers restarted from their
// checkpoints, and of the checkpoints themselves: killed mid-write,
// corrupt, of another layout, failing to save.
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
  // The workers left saying they failed: the server ends the job as failed
  // by itself.
  EXPECT_EQ(job.WaitServer(), 1) << job.ServerOutput();
  EXPECT_THAT(job.ServerOutput(),
              HasSubstr("every worker has left, but the job failed: rank 0: "
                        "FAILED_PRECONDITION: a parameter server came back "
                        "without the job's weights"));
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

// A checkpoint that fails (here its folder was replaced by a file) is tried
// again after 5 s, doubling, not on every 50 ms tick: each try snapshots and
// encodes the whole shard. The final one failing is the server's failure.
// The job runs about 6 s after the break: a write already under way when
// the folder moved may sit in fsync for seconds on a busy disk (a CI run
// saw 2.5 s, the whole of the 120-step job this test used to run), and no
// periodic try can fail before it ends.
TEST(FaultTest, FailingCheckpointsAreRetriedWithBackoff) {
  Job job(1);
  job.StartServer({"--checkpoint_every_steps=1"});
  job.StartWorker(0,
                  Flags({"--max_steps=300", "--epochs=4", "--straggle=0:20"}));
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
  // The first try, then one every 5 s or more (about 6 s of steps here),
  // where every 50 ms tick used to try (about 120).
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

// Every checkpoint damaged: the server refuses to start from version 0
// (exit 2, naming the files), again when restarted with them set aside,
// and starts fresh only when told to; that job then trains as a new one.
TEST(FaultTest, OnlyDamagedCheckpointsAreNotASilentFreshStart) {
  Job job(2);
  job.StartServer({"--checkpoint_every_steps=10", "--checkpoints_to_keep=2"});
  job.StartWorker(0, Flags());
  job.StartWorker(1, Flags());
  ASSERT_EQ(job.WaitWorker(0), 0) << job.WorkerOutput(0);
  ASSERT_EQ(job.WaitWorker(1), 0);
  ASSERT_EQ(job.WaitServer(), 0);
  // One or two, as the ticks saw the versions go by; all are damaged.
  const std::vector<std::string> files = job.CheckpointFiles();
  ASSERT_FALSE(files.empty()) << job.ServerOutput();
  for (size_t i = 0; i < files.size(); ++i) {
    if (i % 2 == 0) {
      job.CorruptByte(files[i]);
    } else {
      job.Truncate(files[i]);
    }
  }

  job.StartServer({});
  EXPECT_EQ(job.WaitServer(), 2) << job.ServerOutput();
  job.StartServer({});  // The files are set aside now: still refused.
  EXPECT_EQ(job.WaitServer(), 2) << job.ServerOutput();
  const std::string refusals = job.ServerOutput();
  EXPECT_THAT(refusals, HasSubstr("no earlier checkpoint is left"));
  EXPECT_THAT(refusals, HasSubstr("no intact checkpoint in"));
  for (const std::string& path : files) {
    EXPECT_THAT(refusals, HasSubstr(path + ".corrupt"));
  }
  EXPECT_THAT(refusals, HasSubstr("--allow_fresh_start"));

  job.StartServer({"--allow_fresh_start"});
  job.StartWorker(0, Flags());
  job.StartWorker(1, Flags());
  EXPECT_EQ(job.WaitWorker(0), 0) << job.WorkerOutput(0);
  EXPECT_EQ(job.WaitWorker(1), 0);
  EXPECT_EQ(job.WaitServer(), 0) << job.ServerOutput();
  EXPECT_THAT(job.ServerOutput(), HasSubstr("starting from version 0 as "
                                            "--allow_fresh_start asks"));
  EXPECT_EQ(job.Weights(0), Reference());
}

}  // namespace
}  // namespace lockstep
