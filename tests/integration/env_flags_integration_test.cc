// Infrastructure flags from LOCKSTEP_* variables (common/flags/env_flags.h)
// through real processes: a job whose listen address, port file, token and
// checkpoint folder come only from the environment trains to the weights
// of the same job given them as flags; the command line overrides a
// variable; a bad value exits 2 naming the variable; lockstep_launch keeps
// one process's port variables from its children.
#include <dirent.h>

#include <fstream>
#include <string>
#include <vector>

#include "absl/strings/match.h"
#include "absl/strings/str_cat.h"
#include "common/base/exit_codes.h"
#include "gmock/gmock.h"
#include "gtest/gtest.h"
#include "tests/integration/subprocess.h"
#include "tests/integration/training_jobs.h"

namespace lockstep {
namespace {

using ::testing::HasSubstr;

std::string WriteToken(const std::string& dir, const std::string& name,
                       const std::string& token) {
  const std::string path = absl::StrCat(dir, "/", name);
  std::ofstream(path) << token << "\n";
  return path;
}

// Train()'s worker (training_jobs.h) for one worker of batch 8 with Adam,
// less --servers: the same job, so the same weights.
std::vector<std::string> WorkerArgs(const std::string& weights) {
  std::vector<std::string> argv = {kBin + "/lockstep_worker", "--workers=1",
                                   "--rank=0", "--dump_weights=" + weights};
  for (std::string& f : TrainFlags(8, "adam")) argv.push_back(f);
  return argv;
}

int CheckpointsIn(const std::string& dir) {
  int count = 0;
  if (DIR* d = opendir(dir.c_str())) {
    while (const dirent* entry = readdir(d)) {
      if (absl::StartsWith(entry->d_name, "ckpt-")) ++count;
    }
    closedir(d);
  }
  return count;
}

TEST(EnvironmentFlagsTest, AJobTakesItsInfrastructureFromTheEnvironment) {
  const std::vector<float> expected = Train(1, 8, "adam");
  ASSERT_FALSE(expected.empty());

  const std::string dir = MakeTempDir();
  const std::string token =
      WriteToken(dir, "token", "0123456789abcdef0123456789abcdef");
  const std::string wrong =
      WriteToken(dir, "wrong", "fedcba9876543210fedcba9876543210");
  const std::string port_file = dir + "/port";
  const std::string checkpoints = dir + "/ckpt";
  // The server's command line says only how many workers it waits for.
  Subprocess server = Subprocess::Start(
      {kBin + "/lockstep_server", "--workers=1", "--checkpoint_every_steps=10"},
      {"LOCKSTEP_LISTEN=127.0.0.1:0", "LOCKSTEP_PORT_FILE=" + port_file,
       "LOCKSTEP_TOKEN_FILE=" + token,
       "LOCKSTEP_CHECKPOINT_DIR=" + checkpoints});
  std::string port;
  const absl::Time deadline = absl::Now() + absl::Seconds(30);
  while (port.empty() && absl::Now() < deadline &&
         !server.Wait(absl::Milliseconds(10)).has_value()) {
    port = ReadFile(port_file);
  }
  ASSERT_FALSE(port.empty()) << server.Output();
  const std::string servers =
      absl::StrCat("--servers=127.0.0.1:", absl::StripAsciiWhitespace(port));

  // The command line wins: the right token in the environment, a wrong one
  // as a flag, and the server refuses the worker.
  std::vector<std::string> refused_args = WorkerArgs(dir + "/refused");
  refused_args.push_back(servers);
  refused_args.push_back("--token_file=" + wrong);
  RunResult refused =
      RunProcess(refused_args, {"LOCKSTEP_TOKEN_FILE=" + token}, kDeadline);
  EXPECT_NE(refused.exit_code, kExitOk) << refused.output;
  EXPECT_THAT(refused.output, HasSubstr("UNAUTHENTICATED"));
  EXPECT_THAT(refused.output,
              HasSubstr("the command line overrides LOCKSTEP_TOKEN_FILE"));

  // The token from the environment alone is let in, and trains as Train().
  std::vector<std::string> args = WorkerArgs(dir + "/w0");
  args.push_back(servers);
  RunResult trained =
      RunProcess(args, {"LOCKSTEP_TOKEN_FILE=" + token}, kDeadline);
  ASSERT_EQ(trained.exit_code, kExitOk) << trained.output;
  EXPECT_THAT(trained.output, HasSubstr(absl::StrCat(
                                  "from the environment: --token_file=", token,
                                  " (LOCKSTEP_TOKEN_FILE)")));
  EXPECT_EQ(server.Wait(kDeadline), kExitOk) << server.Output();
  EXPECT_THAT(server.Output(),
              HasSubstr("--listen=127.0.0.1:0 (LOCKSTEP_LISTEN)"));
  EXPECT_EQ(ReadWeights(dir + "/w0"), expected);
  EXPECT_GE(CheckpointsIn(checkpoints + "/shard-0-of-1"), 1) << server.Output();
}

TEST(EnvironmentFlagsTest, ABadValueExitsTwoNamingTheVariable) {
  RunResult r =
      RunProcess({kBin + "/lockstep_server", "--workers=1", "--validate_only"},
                 {"LOCKSTEP_METRICS_PORT=ninety"});
  EXPECT_EQ(r.exit_code, kExitPermanent) << r.output;
  EXPECT_THAT(r.output, HasSubstr("LOCKSTEP_METRICS_PORT=ninety: "));
  EXPECT_THAT(r.output, HasSubstr("(it sets --metrics_port)"));
}

// One metrics port for the launcher's environment would be every child's,
// and all but one would fail to bind it: the launcher keeps it from them.
TEST(EnvironmentFlagsTest, TheLauncherKeepsPortVariablesFromItsChildren) {
  RunResult r = RunProcess(
      {kBin + "/lockstep_launch", "--ps=1", "--workers=2", "--max_steps=4",
       "--dataset=synthetic", "--synthetic_examples=256", "--layers=8,4",
       "--batch_size=16", "--progress=none"},
      {absl::StrCat("LOCKSTEP_METRICS_PORT=", FreePort())}, kDeadline);
  EXPECT_EQ(r.exit_code, kExitOk) << r.output;
}

}  // namespace
}  // namespace lockstep
