// `lockstep_ctl reshard` through real processes: a job of two server shards
// trained one epoch and checkpointed, its checkpoints rewritten for three
// shards and for one, and each resumed to two epochs, ends with the weights
// of two epochs straight on one shard, bit for bit (Adam's slots carry
// over, element by element, whatever the shards).
#include <cstdint>
#include <string>
#include <vector>

#include "absl/strings/str_cat.h"
#include "absl/strings/str_join.h"
#include "gmock/gmock.h"
#include "gtest/gtest.h"
#include "tests/integration/subprocess.h"
#include "tests/integration/training_jobs.h"

namespace lockstep {
namespace {

using ::testing::ElementsAre;
using ::testing::HasSubstr;

// Two workers, Adam, 10 steps an epoch, chunks of 1000 bytes (several a
// shard); rank 0 dumps its final weights.
std::vector<std::string> Worker(const std::string& servers, int rank,
                                int epochs, const std::string& dir) {
  return {kBin + "/lockstep_worker",
          "--servers=" + servers,
          "--workers=2",
          absl::StrCat("--rank=", rank),
          "--dataset=synthetic",
          "--synthetic_examples=160",
          "--layers=23,17,5",
          "--optimizer=adam",
          "--batch_size=8",
          absl::StrCat("--epochs=", epochs),
          "--seed=7",
          "--chunk_bytes=1000",
          "--progress=none",
          absl::StrCat("--dump_weights=", dir, "/w", rank),
          absl::StrCat("--summary_json=", dir, "/s", rank)};
}

struct Job {
  std::vector<float> weights;  // Rank 0's; empty when the job failed.
  std::vector<int64_t> steps;  // Each worker's.
  std::string server_log;      // Shard 0's.
};

// One job of two workers against `shards` servers, each given `flags`.
Job RunJob(int shards, int epochs, const std::vector<std::string>& flags) {
  const std::string dir = MakeTempDir();
  std::vector<Server> servers;
  std::vector<std::string> addresses;
  std::vector<std::string> server_flags = {"--sum_order=rank"};
  server_flags.insert(server_flags.end(), flags.begin(), flags.end());
  for (int s = 0; s < shards; ++s) {
    servers.push_back(StartServer(2, dir, s, shards, server_flags));
    addresses.push_back(servers.back().address);
  }
  std::vector<Subprocess> procs;
  for (int rank = 0; rank < 2; ++rank) {
    procs.push_back(Subprocess::Start(
        Worker(absl::StrJoin(addresses, ","), rank, epochs, dir)));
  }
  Job job;
  if (!WaitForWorkers(procs, servers)) return job;
  for (Server& server : servers) {
    EXPECT_EQ(server.process.Wait(kDeadline), 0) << server.process.Output();
  }
  job.server_log = servers[0].process.Output();
  job.weights = ReadWeights(dir + "/w0");
  for (int rank = 0; rank < 2; ++rank) {
    job.steps.push_back(
        JsonInt(ReadFile(absl::StrCat(dir, "/s", rank)), "steps"));
  }
  return job;
}

RunResult Reshard(const std::string& from, const std::string& to, int shards) {
  return RunProcess(
      {kBin + "/lockstep_ctl", "reshard", from, to,
       absl::StrCat("--num_shards=", shards), "--chunk_bytes=1000"},
      {}, kDeadline);
}

TEST(ReshardTest, TwoShardsResumedOnThreeOrOneEqualTwoEpochsStraight) {
  const Job straight = RunJob(1, 2, {});
  ASSERT_EQ(straight.weights.size(), size_t{23 * 17 + 17 + 17 * 5 + 5});
  const std::string first = MakeTempDir() + "/ckpt";
  const Job one = RunJob(2, 1, {"--checkpoint_dir=" + first});
  ASSERT_EQ(one.weights.size(), straight.weights.size());
  EXPECT_NE(one.weights, straight.weights);

  for (int shards : {3, 1}) {
    SCOPED_TRACE(absl::StrCat(shards, " shard(s)"));
    const std::string to = MakeTempDir() + "/resharded";
    const RunResult r = Reshard(first, to, shards);
    ASSERT_EQ(r.exit_code, 0) << r.output;
    EXPECT_THAT(r.output,
                HasSubstr(absl::StrCat("version 10 of 2 shard(s) in ", first,
                                       ", resharded for ", shards)));
    const Job resumed = RunJob(
        shards, 2,
        {"--checkpoint_dir=" + MakeTempDir() + "/ckpt", "--init_from=" + to});
    EXPECT_THAT(resumed.server_log,
                HasSubstr("starting from version 10 of " + to));
    EXPECT_THAT(resumed.steps, ElementsAre(10, 10));
    EXPECT_EQ(resumed.weights, straight.weights);
  }

  // Refused: a folder that already holds checkpoints, one that holds no
  // job's, and no --num_shards.
  const std::string full = MakeTempDir() + "/full";
  ASSERT_EQ(Reshard(first, full, 3).exit_code, 0);
  const RunResult again = Reshard(first, full, 3);
  EXPECT_EQ(again.exit_code, 2) << again.output;
  EXPECT_THAT(again.output, HasSubstr("reshard into an empty folder"));
  const std::string empty = MakeTempDir();
  const RunResult none = Reshard(empty, MakeTempDir() + "/x", 3);
  EXPECT_EQ(none.exit_code, 2) << none.output;
  EXPECT_THAT(none.output, HasSubstr("no shard-I-of-S folders in " + empty));
  const RunResult usage = RunProcess(
      {kBin + "/lockstep_ctl", "reshard", first, MakeTempDir()}, {}, kDeadline);
  EXPECT_EQ(usage.exit_code, 2);
  EXPECT_THAT(usage.output, HasSubstr("--num_shards=S"));
}

}  // namespace
}  // namespace lockstep
