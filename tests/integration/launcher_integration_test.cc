// lockstep_launch reaching every process, through real binaries on
// loopback: a server-only flag reaches the servers, the printed
// lockstep_ctl line and the per-process metrics and health ports answer, and a
// bad flag stops the launch, once, before any server or worker starts.
#include <arpa/inet.h>
#include <dirent.h>
#include <netinet/in.h>
#include <signal.h>
#include <sys/socket.h>
#include <unistd.h>

#include <string>
#include <utility>
#include <vector>

#include "absl/strings/match.h"
#include "absl/strings/str_cat.h"
#include "absl/strings/str_join.h"
#include "absl/strings/str_split.h"
#include "common/base/exit_codes.h"
#include "gmock/gmock.h"
#include "gtest/gtest.h"
#include "tests/integration/ops_test_util.h"
#include "tests/integration/subprocess.h"

namespace lockstep {
namespace {

using ::testing::HasSubstr;
using ::testing::Not;

// From the macro, not kBin: another file's global may not be made yet.
const std::string kLaunch = LOCKSTEP_BIN_DIR "/lockstep_launch";

// A tiny job on synthetic data.
const std::vector<std::string> kTinyJob = {
    "--dataset=synthetic", "--synthetic_examples=256", "--layers=8,4",
    "--batch_size=16", "--progress=none"};

std::vector<std::string> Concat(std::vector<std::string> a,
                                const std::vector<std::string>& b) {
  a.insert(a.end(), b.begin(), b.end());
  return a;
}

// The file names in `dir`.
std::vector<std::string> FilesIn(const std::string& dir) {
  std::vector<std::string> names;
  if (DIR* d = opendir(dir.c_str())) {
    while (const dirent* entry = readdir(d)) {
      const std::string name = entry->d_name;
      if (name != "." && name != "..") names.push_back(name);
    }
    closedir(d);
  }
  return names;
}

// Whether nothing listens on 127.0.0.1:port now.
bool PortIsFree(int port) {
  const int fd = socket(AF_INET, SOCK_STREAM, 0);
  sockaddr_in addr{};
  addr.sin_family = AF_INET;
  addr.sin_addr.s_addr = htonl(INADDR_LOOPBACK);
  addr.sin_port = htons(static_cast<uint16_t>(port));
  const bool free =
      bind(fd, reinterpret_cast<sockaddr*>(&addr), sizeof(addr)) == 0;
  close(fd);
  return free;
}

// A port P with P..P+count-1 free now; 0 when none was found.
int FreePortRange(int count) {
  for (int attempt = 0; attempt < 50; ++attempt) {
    const int base = FreePort();
    bool all = true;
    for (int i = 1; i < count && all; ++i) all = PortIsFree(base + i);
    if (all) return base;
  }
  return 0;
}

// The text after `prefix` on the first line of `output` that holds it;
// empty when none does.
std::string LineAfter(const std::string& output, const std::string& prefix) {
  const size_t at = output.find(prefix);
  if (at == std::string::npos) return "";
  const size_t start = at + prefix.size();
  return output.substr(start, output.find('\n', start) - start);
}

// A worker flag with {rank} reaches each worker as its own path.
TEST(LauncherFlagsTest, AServerFlagReachesTheServers) {
  const std::string dir = MakeTempDir();
  const std::string weights = MakeTempDir();
  RunResult r = RunProcess(
      Concat({kLaunch, "--workers=2", "--ps=2", "--checkpoint_dir=" + dir,
              "--max_steps=6", "--dump_weights=" + weights + "/w{rank}.bin"},
             kTinyJob),
      {}, absl::Seconds(120));
  ASSERT_EQ(r.exit_code, 0) << r.output;
  const std::string w0 = ReadFile(weights + "/w0.bin");
  EXPECT_EQ(w0.size(), (8 * 4 + 4) * sizeof(float)) << r.output;
  EXPECT_EQ(ReadFile(weights + "/w1.bin"), w0);
  // Each shard saves its final checkpoint in its folder there.
  for (int shard = 0; shard < 2; ++shard) {
    const std::string shard_dir = absl::StrCat(dir, "/shard-", shard, "-of-2");
    const std::vector<std::string> files = FilesIn(shard_dir);
    int checkpoints = 0;
    for (const std::string& name : files) {
      if (absl::StartsWith(name, "ckpt-")) ++checkpoints;
    }
    EXPECT_GE(checkpoints, 1)
        << shard_dir << ": " << absl::StrJoin(files, " ") << "\n"
        << r.output;
  }
}

TEST(LauncherFlagsTest, TheStatusLineAndPerProcessPortsAnswer) {
  const int base = FreePortRange(6);
  ASSERT_NE(base, 0) << "no six free ports in a row";
  const int health = base + 3;
  Subprocess launch = Subprocess::Start(
      Concat({kLaunch, "--workers=2", "--ps=1", "--grace_period=5",
              absl::StrCat("--metrics_port_base=", base),
              absl::StrCat("--health_port_base=", health), "--max_steps=0",
              "--epochs=100000"},
             kTinyJob));
  ASSERT_TRUE(WaitUntil([&] {
    return absl::StrContains(launch.Output(), "worker1: pid ");
  })) << launch.Output();
  const std::string output = launch.Output();
  EXPECT_EQ(LineAfter(output, "[launch] metrics: "),
            absl::StrCat("ps0 http://127.0.0.1:", base, "/metrics, worker0 ",
                         "http://127.0.0.1:", base + 1, "/metrics, worker1 ",
                         "http://127.0.0.1:", base + 2, "/metrics"));
  EXPECT_EQ(LineAfter(output, "[launch] health: "),
            absl::StrCat("ps0 127.0.0.1:", health, ", worker0 127.0.0.1:",
                         health + 1, ", worker1 127.0.0.1:", health + 2));
  // The status command as printed, less --watch (which runs until the end).
  const std::string line = LineAfter(output, "[launch] status: ");
  std::vector<std::string> ctl = absl::StrSplit(line, ' ');
  ASSERT_GE(ctl.size(), 4u) << output;
  EXPECT_EQ(ctl[0], kBin + "/lockstep_ctl");
  EXPECT_EQ(ctl[1], "status");
  EXPECT_EQ(ctl[3], "--watch");
  ctl.erase(ctl.begin() + 3);
  RunResult status;
  EXPECT_TRUE(WaitUntil([&] {
    status = RunProcess(ctl, {}, absl::Seconds(30));
    return status.exit_code == 0;
  })) << status.output;
  EXPECT_THAT(status.output, HasSubstr("2 workers, 1 shard"));
  for (int port = base; port < base + 3; ++port) {
    std::string metrics;
    EXPECT_TRUE(WaitUntil([&] {
      metrics = Scrape(port);
      return !metrics.empty();
    })) << "port "
        << port;
    EXPECT_THAT(metrics, HasSubstr("# TYPE ")) << "port " << port;
    EXPECT_TRUE(WaitUntil([&] {
      return HealthIs(port + 3, HealthStatus::kServing);
    })) << "port "
        << port + 3;
  }
  ASSERT_EQ(kill(launch.pid(), SIGTERM), 0);
  EXPECT_EQ(launch.Wait(absl::Seconds(60)), 128 + SIGTERM) << launch.Output();
}

TEST(LauncherFlagsTest, AnUnknownFlagStopsTheLaunchWithAHint) {
  RunResult r = RunProcess(
      Concat({kLaunch, "--workers=1", "--checkpoint_dri=/tmp/x"}, kTinyJob), {},
      absl::Seconds(60));
  EXPECT_EQ(r.exit_code, kExitPermanent) << r.output;
  EXPECT_THAT(r.output, HasSubstr("unknown flag --checkpoint_dri; did you mean "
                                  "--checkpoint_dir?"));
  EXPECT_THAT(r.output, Not(HasSubstr("[ps0]")));
  EXPECT_THAT(r.output, Not(HasSubstr("[launch]")));
}

// Flags absl cannot parse and values the worker refuses alike.
TEST(LauncherFlagsTest, AWorkerFlagErrorShowsOnceBeforeAnythingStarts) {
  for (const auto& [flag, error] :
       std::vector<std::pair<std::string, std::string>>{
           {"--epochs=many",
            "Illegal value 'many' specified for flag 'epochs'"},
           {"--optimizer=rmsprop", "--optimizer must be"}}) {
    RunResult r = RunProcess(Concat({kLaunch, "--workers=2", flag}, kTinyJob),
                             {}, absl::Seconds(60));
    EXPECT_EQ(r.exit_code, kExitPermanent) << r.output;
    ASSERT_THAT(r.output, HasSubstr(error));
    EXPECT_EQ(r.output.find(error), r.output.rfind(error)) << r.output;
    EXPECT_THAT(r.output, HasSubstr("lockstep_worker refuses its flags; "
                                    "nothing was started"));
    EXPECT_THAT(r.output, Not(HasSubstr("[launch]")));
  }
}

// A fixed port given to several workers is refused with the way to give
// each its own.
TEST(LauncherFlagsTest, ASharedPortPointsToThePortBase) {
  RunResult r = RunProcess(
      Concat({kLaunch, "--workers=2", "--metrics_port=9100"}, kTinyJob), {},
      absl::Seconds(60));
  EXPECT_EQ(r.exit_code, kExitPermanent) << r.output;
  EXPECT_THAT(r.output, HasSubstr("--metrics_port would give all 2 workers "
                                  "the same port; --metrics_port_base=N "
                                  "gives each process its own"));
  EXPECT_THAT(r.output, Not(HasSubstr("[launch]")));
}

// The servers' values are checked the same way, explicit ones included.
TEST(LauncherFlagsTest, AServerFlagErrorShowsBeforeAnythingStarts) {
  RunResult r = RunProcess(
      Concat({kLaunch, "--workers=1", "--on_worker_loss=panic"}, kTinyJob), {},
      absl::Seconds(60));
  EXPECT_EQ(r.exit_code, kExitPermanent) << r.output;
  EXPECT_THAT(r.output, HasSubstr("lockstep_server refuses its flags"));
  EXPECT_THAT(r.output, HasSubstr("--on_worker_loss"));
  EXPECT_THAT(r.output, Not(HasSubstr("[launch]")));
}

TEST(LauncherFlagsTest, AnExplicitServerFlagIsCheckedToo) {
  RunResult r = RunProcess(
      Concat({kLaunch, "--workers=1", "--server_flag=--no_such_flag=1"},
             kTinyJob),
      {}, absl::Seconds(60));
  EXPECT_EQ(r.exit_code, kExitPermanent) << r.output;
  EXPECT_THAT(r.output, HasSubstr("lockstep_server refuses its flags"));
  EXPECT_THAT(r.output, HasSubstr("no_such_flag"));
  EXPECT_THAT(r.output, Not(HasSubstr("[launch]")));
}

}  // namespace
}  // namespace lockstep
