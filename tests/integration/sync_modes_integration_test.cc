// Integration tests of the sync modes and the push window through real
// lockstep_server and lockstep_worker processes on loopback: backup
// workers, async, SSP, and what a push window does to results and faults.
#include <optional>
#include <string>
#include <vector>

#include "absl/strings/match.h"
#include "absl/strings/str_cat.h"
#include "absl/strings/str_join.h"
#include "absl/time/clock.h"
#include "gmock/gmock.h"
#include "gtest/gtest.h"
#include "tests/integration/subprocess.h"
#include "tests/integration/training_jobs.h"

namespace lockstep {
namespace {

using ::testing::HasSubstr;
using ::testing::Not;

// The push window changes when chunks travel, never what is summed: 32
// chunks through windows of 1 and 3 and with no window end on the same
// weights bit for bit. (Two workers, because the server adds pushes in
// arrival order, and only a sum of two is the same in either order.)
TEST(TrainingTest, PushWindowLeavesTheWeightsAlone) {
  const std::vector<float> unlimited =
      Train(2, 8, "adam", 2, {"--chunk_bytes=64", "--push_window=0"});
  ASSERT_EQ(unlimited.size(), size_t{23 * 17 + 17 + 17 * 5 + 5});
  for (const char* window : {"--push_window=1", "--push_window=3"}) {
    SCOPED_TRACE(window);
    EXPECT_EQ(Train(2, 8, "adam", 2, {"--chunk_bytes=64", window}), unlimited);
  }
}

// A shard lost mid-step stops only the pushes to it: each worker still
// sends the surviving shard every chunk, which the other worker's pushes
// there wait for, so both leave with the retryable code once their rejoin
// timeout (2 s) passes -- not after the survivor's step timeout (300 s),
// as when a failure stopped every shard's window.
TEST(TrainingTest, LosingOneShardDoesNotStallTheOther) {
  const std::string dir = MakeTempDir();
  std::vector<Server> servers;
  std::vector<std::string> addresses;
  for (int shard = 0; shard < 2; ++shard) {
    servers.push_back(StartServer(2, dir, shard, 2));
    addresses.push_back(servers.back().address);
  }
  std::vector<Subprocess> procs;
  for (int rank = 0; rank < 2; ++rank) {
    procs.push_back(Subprocess::Start(
        {kBin + "/lockstep_worker",
         "--servers=" + absl::StrJoin(addresses, ","), "--workers=2",
         absl::StrCat("--rank=", rank), "--dataset=synthetic",
         "--synthetic_examples=640", "--layers=23,17,5", "--batch_size=8",
         "--epochs=1000", "--seed=7", "--chunk_bytes=64", "--push_window=1",
         // Rank 0's progress line at step 10 says the job is under way.
         "--rejoin_timeout_s=2", "--progress=lines",
         // Rank 1 a little late, so that when the shard goes, rank 0's
         // pushes to the other shard are already waiting there for it.
         "--straggle=1:20"}));
  }
  const absl::Time deadline = absl::Now() + absl::Seconds(60);
  while (!absl::StrContains(procs[0].Output(), "10/40 [") &&
         absl::Now() < deadline) {
    absl::SleepFor(absl::Milliseconds(20));
  }
  ASSERT_THAT(procs[0].Output(), HasSubstr("10/40 ["));
  for (Subprocess& proc : procs) {
    ASSERT_EQ(proc.Wait(absl::Milliseconds(1)), std::nullopt)
        << "the job ended before the shard was lost\n"
        << proc.Output();
  }
  servers[1].process.Kill();
  for (int rank = 0; rank < 2; ++rank) {
    EXPECT_EQ(procs[rank].Wait(absl::Seconds(40)), 75)
        << "rank " << rank << "\n"
        << procs[rank].Output();
  }
  servers[0].process.Kill();
}

// With one backup worker, a straggler that sleeps 2 s per step cannot hold
// the others back: they finish all 20 steps while its late gradients are
// dropped and it skips ahead to the current version.
TEST(SyncModesTest, BackupWorkerLeavesTheStragglerBehind) {
  const std::vector<std::string> s =
      RunJob(3, {"--backup_workers=1", "--straggle=2:2000", "--sync=ps"});
  EXPECT_THAT(s[0], HasSubstr("\"steps\": 20,"));
  EXPECT_THAT(s[1], HasSubstr("\"steps\": 20,"));
  EXPECT_THAT(s[2], Not(HasSubstr("\"steps\": 20,"))) << s[2];
  EXPECT_THAT(s[2], HasSubstr("\"final_version\": 20,"));
}

// The same through a push window of 1 over 32 chunks, where every chunk
// but one waits for a reply: backup workers' dropped pushes, asynchronous
// replies and SSP's held pushes must all free the window.
TEST(SyncModesTest, ModesWorkThroughANarrowPushWindow) {
  const std::vector<std::string> window = {"--chunk_bytes=64",
                                           "--push_window=1"};
  auto with_window = [&](std::vector<std::string> flags) {
    flags.insert(flags.end(), window.begin(), window.end());
    return flags;
  };
  const std::vector<std::string> backup = RunJob(
      3, with_window({"--backup_workers=1", "--straggle=2:500", "--sync=ps"}));
  EXPECT_THAT(backup[0], HasSubstr("\"steps\": 20,"));
  EXPECT_THAT(backup[2], HasSubstr("\"final_version\": 20,"));
  for (const char* mode : {"--sync=async", "--sync=ssp"}) {
    const std::vector<std::string> s = RunJob(2, with_window({mode}));
    for (const std::string& summary : s) {
      EXPECT_THAT(summary, HasSubstr("\"steps\": 20,")) << mode;
    }
  }
}

TEST(SyncModesTest, AsyncAndSspFinishEveryStep) {
  for (const std::vector<std::string>& flags :
       {std::vector<std::string>{"--sync=async"},
        std::vector<std::string>{"--sync=ssp", "--staleness=2"}}) {
    const std::vector<std::string> s = RunJob(2, flags);
    int64_t last_version = 0;
    for (const std::string& summary : s) {
      EXPECT_THAT(summary, HasSubstr("\"steps\": 20,")) << flags[0];
      last_version = std::max(last_version, JsonInt(summary, "final_version"));
    }
    // Every push is applied on its own: two workers make 40 versions, and
    // the last to finish sees them all.
    EXPECT_EQ(last_version, 40) << flags[0];
  }
}

// In async mode the server's version counts every push, so a worker that
// joins after the others have finished finds it past its own 20 steps; it
// must still train them (it once refused, when loading its data was slow).
TEST(SyncModesTest, AsyncWorkerThatJoinsLateStillTrains) {
  const std::string dir = MakeTempDir();
  Server server = StartServer(3, dir);
  auto start = [&](int rank) {
    return Subprocess::Start(
        {kBin + "/lockstep_worker", "--servers=" + server.address,
         "--workers=3", absl::StrCat("--rank=", rank), "--sync=async",
         "--dataset=synthetic", "--synthetic_examples=640", "--layers=23,17,5",
         "--batch_size=8", "--max_steps=20", "--progress=none",
         absl::StrCat("--summary_json=", dir, "/s", rank)});
  };
  std::vector<Subprocess> early;
  for (int rank = 0; rank < 2; ++rank) early.push_back(start(rank));
  for (Subprocess& p : early) EXPECT_EQ(p.Wait(kDeadline), 0) << p.Output();
  Subprocess late = start(2);
  EXPECT_EQ(late.Wait(kDeadline), 0) << late.Output();
  const std::string summary = ReadFile(absl::StrCat(dir, "/s2"));
  EXPECT_THAT(summary, HasSubstr("\"steps\": 20,"));
  EXPECT_EQ(JsonInt(summary, "final_version"), 60) << summary;
  EXPECT_EQ(server.process.Wait(kDeadline), 0) << server.process.Output();
}

}  // namespace
}  // namespace lockstep
