// Tests for lockstep_launch's core: argument splitting, command lines and
// environments, GPU placement, and whole launches with stand-in server and
// worker scripts (the process group: process_group_test.cc).
#include "deploy/launch/launcher.h"

#include <fcntl.h>
#include <signal.h>
#include <sys/mman.h>
#include <sys/stat.h>
#include <sys/wait.h>
#include <unistd.h>

#include <cstdio>
#include <cstdlib>
#include <map>
#include <optional>
#include <string>
#include <vector>

#include "absl/strings/match.h"
#include "absl/strings/str_cat.h"
#include "absl/strings/str_split.h"
#include "absl/time/clock.h"
#include "absl/time/time.h"
#include "deploy/launch/launcher_args.h"
#include "deploy/launch/line_prefixer.h"
#include "deploy/launch/process_group.h"
#include "gmock/gmock.h"
#include "gtest/gtest.h"
#include "tests/unit/launch_test_util.h"

namespace lockstep {
namespace {

using ::testing::ElementsAre;
using ::testing::HasSubstr;
using ::testing::UnorderedElementsAre;
using Reason = RunResult::Reason;

// nvidia-smi lists every GPU; CUDA shows a worker only those that
// CUDA_VISIBLE_DEVICES names, numbered from 0, so --gpu=rank % GPUs must
// count those.
TEST(VisibleGpusTest, FollowsCudaVisibleDevices) {
  EXPECT_EQ(VisibleGpus(8, nullptr), 8);
  EXPECT_EQ(VisibleGpus(8, "2,3"), 2);
  EXPECT_EQ(VisibleGpus(8, " 5 , 1 , 7 "), 3);
  EXPECT_EQ(VisibleGpus(4, "GPU-6d8e1b2c,GPU-0f4a2e91"), 2);  // UUIDs.
  // The list ends at its first invalid entry:
  EXPECT_EQ(VisibleGpus(8, "0,1,,2"), 2);    // empty,
  EXPECT_EQ(VisibleGpus(8, "0,-1,2"), 1);    // negative,
  EXPECT_EQ(VisibleGpus(8, "3,1gpu,2"), 1);  // not a number,
  EXPECT_EQ(VisibleGpus(2, "0,1,2,3"), 2);   // not installed,
  EXPECT_EQ(VisibleGpus(4, "1,7,0"), 1);
  EXPECT_EQ(VisibleGpus(8, "2,2,3"), 1);       // repeated,
  EXPECT_EQ(VisibleGpus(8, "GPU-6d8e,1"), 1);  // of another kind.
  EXPECT_EQ(VisibleGpus(8, ""), 0);
  EXPECT_EQ(VisibleGpus(8, "-1"), 0);
  EXPECT_EQ(VisibleGpus(0, "0"), 0);
  // One MIG device per process.
  EXPECT_EQ(VisibleGpus(1, "MIG-4f5a,MIG-8c2d"), 1);
}

// ------------------------------------------------------- SplitLauncherArgs

FlagKind TestFlags(absl::string_view name) {
  static const auto* kFlags = new std::map<std::string, FlagKind, std::less<>>{
      {"workers", FlagKind::kValued},
      {"ps", FlagKind::kValued},
      {"help", FlagKind::kBool},
      {"verbose", FlagKind::kBool}};
  auto it = kFlags->find(name);
  return it == kFlags->end() ? FlagKind::kUnknown : it->second;
}

TEST(SplitLauncherArgsTest, SeparatesFlagsKeepingOrder) {
  absl::StatusOr<SplitArgs> split = SplitLauncherArgs(
      {"launch", "--lr=0.1", "--workers=4", "data.bin", "--verbose",
       "--noverbose", "-ps=2", "--epochs", "3", "--nops", "-", "--help"},
      TestFlags);
  ASSERT_TRUE(split.ok()) << split.status();
  EXPECT_THAT(split->launcher, ElementsAre("launch", "--workers=4", "--verbose",
                                           "--noverbose", "-ps=2", "--help"));
  EXPECT_THAT(split->passthrough, ElementsAre("--lr=0.1", "data.bin",
                                              "--epochs", "3", "--nops", "-"));
}

TEST(SplitLauncherArgsTest, EverythingAfterDoubleDashGoesToTheWorkers) {
  absl::StatusOr<SplitArgs> split = SplitLauncherArgs(
      {"launch", "--ps=1", "--", "--workers=9", "--", "x"}, TestFlags);
  ASSERT_TRUE(split.ok()) << split.status();
  EXPECT_THAT(split->launcher, ElementsAre("launch", "--ps=1"));
  EXPECT_TRUE(split->passthrough.empty());
  EXPECT_THAT(split->worker_flags, ElementsAre("--workers=9", "--", "x"));
}

TEST(SplitLauncherArgsTest, AProgramAfterTheDoubleDashIsACommand) {
  absl::StatusOr<SplitArgs> split =
      SplitLauncherArgs({"launch", "--ps=1", "--lr=0.1", "--", "python3",
                         "train.py", "--workers=9", "--"},
                        TestFlags);
  ASSERT_TRUE(split.ok()) << split.status();
  EXPECT_THAT(split->launcher, ElementsAre("launch", "--ps=1"));
  EXPECT_THAT(split->passthrough, ElementsAre("--lr=0.1"));
  EXPECT_THAT(split->command,
              ElementsAre("python3", "train.py", "--workers=9", "--"));
}

TEST(SplitLauncherArgsTest, RejectsSeparateValueForLauncherFlag) {
  absl::StatusOr<SplitArgs> split =
      SplitLauncherArgs({"launch", "--workers", "4"}, TestFlags);
  ASSERT_FALSE(split.ok());
  EXPECT_EQ(split.status().code(), absl::StatusCode::kInvalidArgument);
  EXPECT_THAT(split.status().message(), HasSubstr("--workers=VALUE"));
}

// ------------------------------------------------------------ Launcher

TEST(LauncherTest, CommandLines) {
  LaunchOptions options;
  options.workers = 3;
  options.ps = 1;
  options.bin_dir = "/b";
  options.summary_json = "/tmp/s.json";
  options.worker_args = {"--lr=0.5", "--rank=7"};
  EXPECT_THAT(ServerArgv(options, 0, "/t/ps0.port"),
              ElementsAre("/b/lockstep_server", "--listen=127.0.0.1:0",
                          "--port_file=/t/ps0.port", "--workers=3",
                          "--exit_when_done"));
  EXPECT_THAT(
      WorkerArgv(options, 0, "h:1,h:2"),
      ElementsAre("/b/lockstep_worker", "--servers=h:1,h:2", "--workers=3",
                  "--rank=0", "--progress=lines", "--summary_json=/tmp/s.json",
                  "--lr=0.5", "--rank=7"));
  options.progress_bar = true;
  EXPECT_THAT(WorkerArgv(options, 0, "h:1"),
              testing::Contains("--progress=bar"));
  EXPECT_THAT(
      WorkerArgv(options, 2, "h:1"),
      ElementsAre("/b/lockstep_worker", "--servers=h:1", "--workers=3",
                  "--rank=2", "--progress=none", "--lr=0.5", "--rank=7"));
  options.ps = 2;
  EXPECT_THAT(ServerArgv(options, 1, "/t/ps1.port"),
              ElementsAre("/b/lockstep_server", "--listen=127.0.0.1:0",
                          "--port_file=/t/ps1.port", "--workers=3",
                          "--exit_when_done", "--shard=1", "--num_shards=2"));
  options.sum_order = "rank";
  EXPECT_THAT(ServerArgv(options, 0, "/t/ps0.port"),
              testing::Contains("--sum_order=rank"));
  EXPECT_FALSE(ValidateLaunchOptions(options).has_value());
  options.sum_order = "random";
  std::optional<InvalidLaunchOption> invalid = ValidateLaunchOptions(options);
  ASSERT_TRUE(invalid.has_value());
  EXPECT_EQ(invalid->option, "sum_order");
  EXPECT_EQ(invalid->problem, "must be arrival or rank, got \"random\"");
}

TEST(LauncherTest, ACommandGetsTheJobInItsEnvironment) {
  LaunchOptions options;
  options.workers = 2;
  options.bin_dir = "/b";
  options.command = {"python3", "train.py"};
  options.summary_json = "/s.json";
  options.tls_dir = "/tls";
  options.token_file = "/token";
  options.gpus = 2;
  EXPECT_THAT(WorkerArgv(options, 1, "h:1"),
              ElementsAre("python3", "train.py"));
  EXPECT_THAT(
      WorkerEnv(options, 0, {"h:1", "h:2"}, "/py", "/old"),
      ElementsAre(
          "LOCKSTEP_RANK=0", "LOCKSTEP_WORKERS=2", "LOCKSTEP_SERVERS=h:1,h:2",
          "RANK=0", "WORLD_SIZE=2", "LOCAL_RANK=0", "LOCAL_WORLD_SIZE=2",
          "TF_CONFIG={\"cluster\": {\"ps\": [\"h:1\", \"h:2\"], "
          "\"worker\": [\"worker0:0\", \"worker1:0\"]}, \"task\": "
          "{\"type\": \"worker\", \"index\": 0}}",
          "LOCKSTEP_PROGRESS=lines", "PYTHONUNBUFFERED=1", "LOCKSTEP_GPU=0",
          "LOCKSTEP_SUMMARY_JSON=/s.json", "LOCKSTEP_TLS_CA=/tls/ca.pem",
          "LOCKSTEP_TLS_CERT=/tls/worker.pem",
          "LOCKSTEP_TLS_KEY=/tls/worker.key", "LOCKSTEP_TOKEN_FILE=/token",
          "PYTHONPATH=/py:/old"));
  // Rank 1: quiet, no summary, the second GPU; no package: PYTHONPATH kept.
  options.tls_dir.clear();
  options.token_file.clear();
  EXPECT_THAT(WorkerEnv(options, 1, {"h:1"}, "", nullptr),
              ElementsAre("LOCKSTEP_RANK=1", "LOCKSTEP_WORKERS=2",
                          "LOCKSTEP_SERVERS=h:1", "RANK=1", "WORLD_SIZE=2",
                          "LOCAL_RANK=1", "LOCAL_WORLD_SIZE=2",
                          "TF_CONFIG={\"cluster\": {\"ps\": [\"h:1\"], "
                          "\"worker\": [\"worker0:0\", \"worker1:0\"]}, "
                          "\"task\": {\"type\": \"worker\", \"index\": 1}}",
                          "LOCKSTEP_PROGRESS=none", "PYTHONUNBUFFERED=1",
                          "LOCKSTEP_GPU=1"));
}

TEST(LauncherTest, ACommandFindsTheLaunchersFolderFirstInPath) {
  EXPECT_EQ(PathWithBinDir("/no/such/bin", "/usr/bin:/bin"),
            "PATH=/no/such/bin:/usr/bin:/bin");
  EXPECT_EQ(PathWithBinDir("/no/such/bin", nullptr), "PATH=/no/such/bin");
  EXPECT_EQ(PathWithBinDir("/usr/bin/../bin", ""), "PATH=/usr/bin");
}

TEST(LauncherTest, PlacesWorkersOnGpusRoundRobin) {
  LaunchOptions options;
  options.workers = 5;
  options.bin_dir = "/b";
  options.gpus = 2;
  for (int rank = 0; rank < 5; ++rank) {
    EXPECT_THAT(WorkerArgv(options, rank, "h:1"),
                testing::Contains(absl::StrCat("--gpu=", rank % 2)));
  }
  options.gpus = 0;
  for (const std::string& arg : WorkerArgv(options, 3, "h:1")) {
    EXPECT_FALSE(absl::StartsWith(arg, "--gpu=")) << arg;
  }
}

// A bin dir with stand-in lockstep_server / lockstep_worker shell scripts.
class FakeBinDir {
 public:
  FakeBinDir(const std::string& server, const std::string& worker) {
    char pattern[] = "/tmp/launcher_test.XXXXXX";
    path_ = mkdtemp(pattern);
    Write("lockstep_server", server);
    Write("lockstep_worker", worker);
  }
  ~FakeBinDir() {
    for (const char* name : {"lockstep_server", "lockstep_worker", "port"}) {
      unlink(absl::StrCat(path_, "/", name).c_str());
    }
    rmdir(path_.c_str());
  }
  const std::string& path() const { return path_; }

 private:
  void Write(const std::string& name, const std::string& body) {
    const std::string file = absl::StrCat(path_, "/", name);
    FILE* f = fopen(file.c_str(), "w");
    fprintf(f, "#!/bin/sh\n%s\n", body.c_str());
    fclose(f);
    chmod(file.c_str(), 0755);
  }
  std::string path_;
};

// Writes port 4242 the way the real server does (rename), then stays up.
constexpr char kServer[] =
    R"(for a; do case $a in --port_file=*) f=${a#*=};; esac; done
echo 4242 > "$f.tmp" && mv "$f.tmp" "$f"
exec sleep 30)";

LaunchOptions FastOptions(const FakeBinDir& bin) {
  LaunchOptions options;
  options.bin_dir = bin.path();
  options.startup_timeout = absl::Seconds(5);
  options.grace_period = absl::Milliseconds(200);
  return options;
}

TEST(LauncherTest, SuccessfulJob) {
  FakeBinDir bin(kServer, R"(echo "$@")");
  LaunchOptions options = FastOptions(bin);
  options.worker_args = {"--lr=0.5"};
  Sink sink;
  EXPECT_EQ(Launch(options, To(sink)), 0);
  const std::string out = sink.Read();
  EXPECT_THAT(out, HasSubstr("[launch] ps0: pid "));
  EXPECT_THAT(out, HasSubstr(", listening on 127.0.0.1:4242\n"));
  EXPECT_THAT(out, HasSubstr("[worker0] --servers=127.0.0.1:4242 --workers=2 "
                             "--rank=0 --progress=lines --lr=0.5\n"));
  EXPECT_THAT(out, HasSubstr("[worker1] --servers=127.0.0.1:4242 --workers=2 "
                             "--rank=1 --progress=none --lr=0.5\n"));
  EXPECT_THAT(out, HasSubstr("[launch] all 2 workers finished\n"));
}

TEST(LauncherTest, FailingWorkerSetsExitCode) {
  FakeBinDir bin(kServer, R"(case "$*" in *--rank=1*) exit 7;; esac
exec sleep 30)");
  Sink sink;
  const absl::Time start = absl::Now();
  EXPECT_EQ(Launch(FastOptions(bin), To(sink)), 7);
  EXPECT_LT(absl::Now() - start, absl::Seconds(5));
  EXPECT_THAT(sink.Read(), HasSubstr("worker1 (pid "));
  EXPECT_THAT(sink.Read(), HasSubstr(") exited with code 7; stopping"));
}

TEST(LauncherTest, ServerExitingBeforeListeningFails) {
  FakeBinDir bin("exit 0", "exit 0");
  Sink sink;
  EXPECT_EQ(Launch(FastOptions(bin), To(sink)), 1);
  EXPECT_THAT(sink.Read(),
              HasSubstr("exited with code 0 before it wrote its port file"));
}

TEST(LauncherTest, StartupTimeout) {
  FakeBinDir bin("exec sleep 30", "exit 0");
  LaunchOptions options = FastOptions(bin);
  options.startup_timeout = absl::Milliseconds(200);
  Sink sink;
  EXPECT_EQ(Launch(options, To(sink)), 1);
  EXPECT_THAT(sink.Read(), HasSubstr("no port file from ps0"));
}

TEST(LauncherTest, ReadPortFile) {
  EXPECT_TRUE(absl::IsNotFound(ReadPortFile("/nonexistent/port").status()));
  FakeBinDir bin("", "");
  const std::string file = absl::StrCat(bin.path(), "/port");
  FILE* f = fopen(file.c_str(), "w");
  fputs("4242\n", f);
  fclose(f);
  EXPECT_EQ(ReadPortFile(file).value_or(0), 4242);
  f = fopen(file.c_str(), "w");
  fputs("not a port", f);
  fclose(f);
  EXPECT_EQ(ReadPortFile(file).status().code(), absl::StatusCode::kDataLoss);
}

}  // namespace
}  // namespace lockstep
