// Bad input of every kind through the real binaries: flags, ports in use,
// data files, a worker with no server or another model. Each is refused
// with a clear message and the documented exit code, and nothing hangs.
#include <algorithm>
#include <cmath>
#include <cstdio>
#include <cstdlib>
#include <cstring>
#include <ostream>
#include <string>
#include <tuple>
#include <vector>

#include "absl/strings/ascii.h"
#include "absl/strings/str_cat.h"
#include "absl/strings/str_join.h"
#include "absl/strings/str_split.h"
#include "absl/time/clock.h"
#include "common/base/exit_codes.h"
#include "gmock/gmock.h"
#include "gtest/gtest.h"
#include "tests/integration/subprocess.h"
#include "tests/integration/training_jobs.h"

namespace lockstep {
namespace {

using ::testing::HasSubstr;
using ::testing::Not;

// gRPC lets a second server bind a port in use (SO_REUSEPORT) and take part
// of its connections; a second lockstep_server on the port must fail
// instead (after waiting 3 s for it), and the first keeps serving.
TEST(BadInputTest, SecondServerOnAPortInUseFailsToListen) {
  const std::string dir = MakeTempDir();
  Server first = StartServer(1, dir);
  const RunResult second = RunProcess(
      {kBin + "/lockstep_server", "--listen=" + first.address, "--workers=1"},
      {}, absl::Seconds(30));
  EXPECT_NE(second.exit_code, 0) << second.output;
  EXPECT_NE(second.exit_code, -1) << "the second server kept running";
  EXPECT_THAT(second.output,
              HasSubstr("cannot listen on " + first.address +
                        " (is another process using the port?)"));
  EXPECT_THAT(second.output, HasSubstr("is in use; waiting up to 3s"));
  // Only Lockstep's lines: none of gRPC's own log of the failed bind
  // ("E1201 12:00:00.0 123 chttp2_server.cc:1051] ... No address added").
  EXPECT_THAT(second.output, Not(HasSubstr("No address added")));
  EXPECT_THAT(second.output, Not(HasSubstr(".cc:")));
  EXPECT_FALSE(first.process.Wait(absl::ZeroDuration()).has_value())
      << first.process.Output();
  first.process.Kill();
}

// A replacement started while its predecessor still holds the port (killed
// a moment ago, or still shutting down) waits for it, then serves.
// Its --health_port too: a replacement waits for both.
TEST(BadInputTest, ServerWaitsForAPortBeingLetGo) {
  const std::string dir = MakeTempDir();
  const int health_port = FreePort();
  const std::string health = absl::StrCat("--health_port=", health_port);
  Server first = StartServer(1, dir, 0, 1, {health});
  Subprocess second = Subprocess::Start(
      {kBin + "/lockstep_server", "--listen=" + first.address, "--workers=1",
       "--port_file=" + dir + "/second_port", health});
  // Killed once the second is waiting for a port (its health port, the
  // first it takes).
  absl::Time deadline = absl::Now() + absl::Seconds(30);
  while (!absl::StrContains(second.Output(), "is in use; waiting") &&
         absl::Now() < deadline) {
    absl::SleepFor(absl::Milliseconds(20));
  }
  first.process.Kill();  // SIGKILL, then reaped.
  deadline = absl::Now() + absl::Seconds(10);
  while (ReadFile(dir + "/second_port").empty() && absl::Now() < deadline &&
         !second.Wait(absl::Milliseconds(20)).has_value()) {
  }
  EXPECT_FALSE(ReadFile(dir + "/second_port").empty()) << second.Output();
  EXPECT_THAT(second.Output(), HasSubstr("listening on " + first.address));
  EXPECT_THAT(second.Output(),
              HasSubstr(absl::StrCat("0.0.0.0:", health_port,
                                     " is in use; waiting up to 3s")));
  second.Kill();
}

TEST(BadInputTest, WorkerWithAnotherModelIsRefusedAtConnect) {
  const std::string dir = MakeTempDir();
  Server server = StartServer(2, dir);
  const std::vector<std::string> common = {kBin + "/lockstep_worker",
                                           "--servers=" + server.address,
                                           "--workers=2",
                                           "--dataset=synthetic",
                                           "--synthetic_examples=640",
                                           "--progress=none",
                                           "--max_steps=3"};
  std::vector<std::string> rank0 = common;
  rank0.insert(rank0.end(), {"--rank=0", "--layers=10,6,3"});
  std::vector<std::string> rank1 = common;
  rank1.insert(rank1.end(), {"--rank=1", "--layers=10,7,3"});
  // Rank 0's model is the job's, whichever registers first: rank 1 is told
  // what differs at once, not left waiting.
  Subprocess first = Subprocess::Start(rank0);
  RunResult refused = RunProcess(rank1, {}, absl::Seconds(30));
  EXPECT_EQ(refused.exit_code, 2) << refused.output;  // Permanent.
  EXPECT_THAT(refused.output, HasSubstr("model signature differs"));
  EXPECT_THAT(refused.output, HasSubstr("dense_0/kernel[10,6]"));
}

// A worker that joins a job which has trained all its steps (its server
// kept running) says so and exits 0, with no test figures of a run of 0
// steps.
TEST(BadInputTest, WorkerJoiningAFinishedJobSaysSo) {
  const std::string dir = MakeTempDir();
  Server server = StartServer(1, dir, 0, 1, {"--exit_when_done=false"});
  const std::vector<std::string> worker = {kBin + "/lockstep_worker",
                                           "--servers=" + server.address,
                                           "--workers=1",
                                           "--rank=0",
                                           "--dataset=synthetic",
                                           "--synthetic_examples=640",
                                           "--layers=10,6,3",
                                           "--progress=none",
                                           "--max_steps=3"};
  const RunResult first = RunProcess(worker, {}, absl::Seconds(60));
  ASSERT_EQ(first.exit_code, 0) << first.output;
  EXPECT_THAT(first.output, HasSubstr("Trained 3 steps - "));
  const RunResult late = RunProcess(worker, {}, absl::Seconds(60));
  EXPECT_EQ(late.exit_code, 0) << late.output;
  EXPECT_THAT(late.output, HasSubstr("The job had already finished (version "
                                     "3): nothing left to train"));
  EXPECT_THAT(late.output, Not(HasSubstr("Test accuracy")));
  server.process.Kill();
}

struct BadRun {
  std::string name;
  std::vector<std::string> args;
  std::vector<std::string> env;
  std::string message;
};

// Keeps ctest's test names short: the case name, not the bytes.
void PrintTo(const BadRun& run, std::ostream* os) { *os << run.name; }

class BadFlagsTest : public ::testing::TestWithParam<BadRun> {};

TEST_P(BadFlagsTest, ExitsTwoWithAClearMessage) {
  const BadRun& run = GetParam();
  std::vector<std::string> argv = {kBin + "/" + run.args[0]};
  argv.insert(argv.end(), run.args.begin() + 1, run.args.end());
  RunResult r = RunProcess(argv, run.env, absl::Seconds(30));
  EXPECT_NE(r.exit_code, -1) << "hung";
  // Permanent: a restart would fail the same way (docs/faults.md).
  EXPECT_EQ(r.exit_code, kExitPermanent) << r.output;
  EXPECT_THAT(r.output, HasSubstr(run.message));
}

const char kWorker[] = "lockstep_worker";
const char kServer[] = "lockstep_server";
const char kCtl[] = "lockstep_ctl";
const char kLaunch[] = "lockstep_launch";

INSTANTIATE_TEST_SUITE_P(
    Cases, BadFlagsTest,
    ::testing::Values(
        BadRun{"batch",
               {kWorker, "--servers=127.0.0.1:1", "--workers=1", "--rank=0",
                "--batch_size=0"},
               {},
               "--batch_size"},
        BadRun{"optimizer",
               {kWorker, "--servers=127.0.0.1:1", "--workers=1", "--rank=0",
                "--optimizer=rmsprop"},
               {},
               "--optimizer must be"},
        BadRun{"layers",
               {kWorker, "--servers=127.0.0.1:1", "--workers=1", "--rank=0",
                "--layers=784,abc"},
               {},
               "--layers"},
        BadRun{"rank",
               {kWorker, "--servers=127.0.0.1:1", "--workers=2", "--rank=2"},
               {},
               "--rank must be in [0, 2)"},
        BadRun{"unknown_flag",
               {kWorker, "--no_such_flag=1"},
               {},
               "unknown flag --no_such_flag (--help lists the flags)"},
        // A near miss is named.
        BadRun{"worker_typo",
               {kWorker, "--epoch=5"},
               {},
               "unknown flag --epoch; did you mean --epochs?"},
        BadRun{"server_typo",
               {kServer, "--chekpoint_dir=/tmp/x"},
               {},
               "unknown flag --chekpoint_dir; did you mean --checkpoint_dir?"},
        BadRun{"ctl_typo",
               {kCtl, "--wach", "status", "127.0.0.1:1"},
               {},
               "unknown flag --wach; did you mean --watch?"},
        BadRun{"server_unknown_flag",
               {kServer, "--no_such_flag"},
               {},
               "unknown flag --no_such_flag"},
        BadRun{"server_not_a_number",
               {kServer, "--workers=two"},
               {},
               "--workers takes a count of at least 1 or auto, got \"two\""},
        // Flags absl itself cannot parse (it would exit 1).
        BadRun{"worker_not_a_number",
               {kWorker, "--batch_size=x"},
               {},
               "Illegal value 'x' specified for flag 'batch_size'"},
        BadRun{"ctl_unknown_flag",
               {kCtl, "--no_such_flag", "status", "127.0.0.1:1"},
               {},
               "unknown flag --no_such_flag"},
        BadRun{"step_timeout",
               {kWorker, "--servers=127.0.0.1:1", "--workers=1", "--rank=0",
                "--step_timeout_s=0"},
               {},
               "--step_timeout_s must be at least 1 (seconds), got 0"},
        BadRun{"launch_not_a_number",
               {kLaunch, "--workers=x"},
               {},
               "Illegal value 'x' specified for flag 'workers'"},
        BadRun{"launch_no_workers",
               {kLaunch, "--workers=0"},
               {},
               "--workers: must be at least 1"},
        BadRun{"launch_tls_dir_alone",
               {kLaunch, "--tls_dir=/tmp"},
               {},
               "--tls_dir needs --tls"},
        BadRun{"help_and_a_bad_flag",
               {kServer, "--help", "--no_such_flag"},
               {},
               "unknown flag --no_such_flag"},
        BadRun{"no_server",
               {kWorker, "--workers=1", "--rank=0"},
               {},
               "no parameter server"},
        BadRun{"tf_config_json",
               {kWorker},
               {"TF_CONFIG={not json"},
               "malformed TF_CONFIG"},
        BadRun{"tf_config_index",
               {kWorker},
               {R"(TF_CONFIG={"cluster": {"ps": ["a:1"], "worker": ["b:1"]},
                   "task": {"type": "worker", "index": 3}})"},
               "out of range"},
        BadRun{"server_tf_config_role",
               {kServer},
               {R"(TF_CONFIG={"cluster": {"ps": ["a:1"], "worker": ["b:1"]},
                   "task": {"type": "worker", "index": 0}})"},
               "lockstep_server runs ps tasks"},
        BadRun{"server_workers", {kServer, "--workers=0"}, {}, "--workers"},
        BadRun{"server_max_parameters",
               {kServer, "--workers=1", "--max_parameters=9223372036854775807"},
               {},
               "--max_parameters must be in [1, 2^40]"},
        BadRun{"server_sum_order",
               {kServer, "--workers=3", "--sum_order=fastest"},
               {},
               "--sum_order must be arrival or rank, got \"fastest\""},
        BadRun{"cpu_conv",
               {kWorker, "--servers=127.0.0.1:1", "--workers=1", "--rank=0",
                "--cpu_conv=winograd"},
               {},
               "unknown cpu_conv \"winograd\""},
        BadRun{"push_window",
               {kWorker, "--servers=127.0.0.1:1", "--workers=1", "--rank=0",
                "--push_window=-1"},
               {},
               "--push_window: push window must be auto or a count >= 0, "
               "got \"-1\""},
        BadRun{"push_thread",
               {kWorker, "--servers=127.0.0.1:1", "--workers=1", "--rank=0",
                "--push_thread=yes"},
               {},
               "--push_thread must be on, off or auto, got \"yes\""},
        BadRun{"model",
               {kWorker, "--servers=127.0.0.1:1", "--workers=1", "--rank=0",
                "--model=resnet77"},
               {},
               "unknown model \"resnet77\"; known: mlp, cnn, resnet20, "
               "resnet50"},
        BadRun{"missing_data",
               {kWorker, "--servers=127.0.0.1:1", "--workers=1", "--rank=0",
                "--data_dir=/nonexistent/dir"},
               {},
               "/nonexistent/dir/train-images-idx3-ubyte"}),
    [](const auto& info) { return info.param.name; });

// A truncated IDX file gets a message naming it, not a crash.
TEST(BadInputTest, TruncatedIdxFileIsNamed) {
  const std::string dir = MakeTempDir();
  const unsigned char header[] = {0, 0,  8, 3, 0, 0,  0, 2, 0, 0,
                                  0, 28, 0, 0, 0, 28, 1, 2, 3};
  for (const char* name :
       {"train-images-idx3-ubyte", "t10k-images-idx3-ubyte"}) {
    FILE* f = std::fopen((dir + "/" + name).c_str(), "wb");
    ASSERT_NE(f, nullptr);
    std::fwrite(header, 1, sizeof(header), f);
    std::fclose(f);
  }
  RunResult r = RunProcess({kBin + "/lockstep_worker", "--servers=127.0.0.1:1",
                            "--workers=1", "--rank=0", "--data_dir=" + dir},
                           {}, absl::Seconds(30));
  EXPECT_EQ(r.exit_code, 2) << r.output;
  EXPECT_THAT(r.output, HasSubstr("train-images-idx3-ubyte"));
  EXPECT_THAT(r.output, HasSubstr("truncated"));
}

// No server at the address: the worker says so every 10 s while it waits,
// then gives up after --connect_timeout_s with the retryable code, naming
// what it tried.
TEST(BadInputTest, NoServerIsSaidWhileWaitingAndRetryableAfterTheTimeout) {
  const std::string nobody = absl::StrCat("127.0.0.1:", FreePort());
  RunResult r = RunProcess(
      {kBin + "/lockstep_worker", "--servers=" + nobody, "--workers=1",
       "--rank=0", "--dataset=synthetic", "--synthetic_examples=64",
       "--layers=8,4", "--connect_timeout_s=11"},
      {}, absl::Seconds(60));
  EXPECT_EQ(r.exit_code, 75) << r.output;
  EXPECT_THAT(
      r.output,
      HasSubstr("lockstep worker 0: no answer yet from shard 0 at " + nobody +
                " after 10s (waiting up to 11s for a "
                "lockstep_server there)"));
  EXPECT_THAT(r.output, HasSubstr("registering with shard 0 at " + nobody));
  EXPECT_THAT(r.output, HasSubstr("(no answer within 11s: is a "
                                  "lockstep_server listening there?"));
}

// An IDX file: magic 0x0000 08 (unsigned bytes) + dims, then the bytes.
void WriteIdx(const std::string& path, const std::vector<uint32_t>& dims) {
  std::string bytes = {0, 0, 8, static_cast<char>(dims.size())};
  size_t body = 1;
  for (uint32_t d : dims) {
    for (int shift : {24, 16, 8, 0})
      bytes.push_back(static_cast<char>(d >> shift));
    body *= d;
  }
  for (size_t i = 0; i < body; ++i) bytes.push_back(static_cast<char>(i % 10));
  FILE* f = std::fopen(path.c_str(), "wb");
  ASSERT_NE(f, nullptr) << path;
  std::fwrite(bytes.data(), 1, bytes.size(), f);
  std::fclose(f);
}

// The test split is read at the very end: one that cannot be evaluated
// (other image size, no images) is refused before training, naming it.
TEST(BadInputTest, TestSplitThatDoesNotFitIsRefusedUpFront) {
  for (const uint32_t test_images : {0u, 4u}) {
    SCOPED_TRACE(test_images);
    const std::string dir = MakeTempDir();
    WriteIdx(dir + "/train-images-idx3-ubyte", {64, 28, 28});
    WriteIdx(dir + "/train-labels-idx1-ubyte", {64});
    const uint32_t side = test_images == 0 ? 28 : 32;
    WriteIdx(dir + "/t10k-images-idx3-ubyte", {test_images, side, side});
    WriteIdx(dir + "/t10k-labels-idx1-ubyte", {test_images});
    RunResult r = RunProcess(
        {kBin + "/lockstep_worker", "--servers=127.0.0.1:1", "--workers=1",
         "--rank=0", "--data_dir=" + dir, "--batch_size=8"},
        {}, absl::Seconds(30));
    EXPECT_EQ(r.exit_code, 2) << r.output;
    EXPECT_THAT(r.output, HasSubstr("the test split (t10k-images-idx3-ubyte"));
    EXPECT_THAT(r.output,
                HasSubstr(test_images == 0 ? "has no examples"
                                           : "has 1024 values per example, the "
                                             "training split 784"));
  }
}

}  // namespace
}  // namespace lockstep
