// What a start must refuse, through the real binaries: an output file that
// could not be written at the end (--dump_weights, --summary_json, the
// server's --weights_file) and flag values out of their range. Each exits 2
// (permanent) at once, naming the flag, the value or path, and why.
#include <cstdio>
#include <ostream>
#include <string>
#include <utility>
#include <vector>

#include "absl/strings/str_cat.h"
#include "absl/time/time.h"
#include "common/base/exit_codes.h"
#include "gmock/gmock.h"
#include "gtest/gtest.h"
#include "tests/integration/subprocess.h"
#include "tests/integration/training_jobs.h"

namespace lockstep {
namespace {

using ::testing::HasSubstr;
using ::testing::Not;

// Long enough for a start, far shorter than a job or the default
// --connect_timeout_s: a refusal that comes only later fails the test.
constexpr absl::Duration kStartLimit = absl::Seconds(10);

void WriteText(const std::string& path, const std::string& text) {
  FILE* f = std::fopen(path.c_str(), "w");
  ASSERT_NE(f, nullptr) << path;
  std::fputs(text.c_str(), f);
  std::fclose(f);
}

// A worker of a real job whose output is unwritable: refused before it
// trains (it once trained every step, then exited 1 without the file).
class UnwritableWorkerOutputTest
    : public ::testing::TestWithParam<const char*> {};

TEST_P(UnwritableWorkerOutputTest, IsRefusedBeforeTraining) {
  const std::string dir = MakeTempDir();
  WriteText(dir + "/file", "x");
  Server server = StartServer(1, dir);
  const std::string flag = GetParam();
  // A missing folder, a file where the folder should be, and a folder
  // where the file should be.
  const std::vector<std::pair<std::string, std::string>> cases = {
      {dir + "/missing/out", "the folder " + dir + "/missing does not exist"},
      {dir + "/file/out", dir + "/file is not a directory"},
      {dir, "it is a directory"}};
  for (const auto& [path, why] : cases) {
    SCOPED_TRACE(path);
    const RunResult r = RunProcess(
        {kBin + "/lockstep_worker", "--servers=" + server.address,
         "--workers=1", "--rank=0", "--dataset=synthetic",
         "--synthetic_examples=64", "--layers=8,4", "--batch_size=8",
         "--max_steps=4", "--progress=none", "--" + flag + "=" + path},
        {}, kStartLimit);
    EXPECT_EQ(r.exit_code, kExitPermanent) << r.output;
    EXPECT_THAT(r.output, HasSubstr(absl::StrCat("lockstep_worker 0: "
                                                 "FAILED_PRECONDITION: --",
                                                 flag, ": cannot write ", path,
                                                 ": ", why)));
    EXPECT_THAT(r.output, Not(HasSubstr("Trained")));
  }
  server.process.Kill();
}

INSTANTIATE_TEST_SUITE_P(Flags, UnwritableWorkerOutputTest,
                         ::testing::Values("dump_weights", "summary_json"));

// The check creates, opens and truncates nothing: an existing output stays
// as it was when the start fails later (here: no data), and no probe file
// is left beside it.
TEST(StartChecksTest, CheckingOutputsLeavesTheFolderAsItWas) {
  const std::string dir = MakeTempDir();
  WriteText(dir + "/summary.json", "earlier run");
  const RunResult r =
      RunProcess({kBin + "/lockstep_worker", "--servers=127.0.0.1:1",
                  "--workers=1", "--rank=0", "--data_dir=" + dir + "/no_data",
                  "--summary_json=" + dir + "/summary.json",
                  "--dump_weights=" + dir + "/weights.safetensors"},
                 {}, kStartLimit);
  EXPECT_EQ(r.exit_code, kExitPermanent) << r.output;
  EXPECT_THAT(r.output, HasSubstr(dir + "/no_data/train-images-idx3-ubyte"));
  EXPECT_EQ(ReadFile(dir + "/summary.json"), "earlier run");
  const RunResult listing = RunProcess({"/bin/ls", "-A", dir}, {}, kStartLimit);
  EXPECT_EQ(listing.output, "summary.json\n");
}

// The server's --weights_file is written when every worker has left: an
// unwritable one ends the server at start, before it listens.
TEST(StartChecksTest, ServerWithAnUnwritableWeightsFileExitsAtStart) {
  const std::string dir = MakeTempDir();
  const std::string path = dir + "/missing/model.safetensors";
  const RunResult r = RunProcess(
      {kBin + "/lockstep_server", "--listen=127.0.0.1:0", "--workers=1",
       "--weights_file=" + path, "--port_file=" + dir + "/port"},
      {}, kStartLimit);
  EXPECT_EQ(r.exit_code, kExitPermanent) << r.output;
  EXPECT_THAT(r.output,
              HasSubstr(absl::StrCat("FAILED_PRECONDITION: --weights_file: "
                                     "cannot write ",
                                     path, ": the folder ", dir,
                                     "/missing does not exist")));
  EXPECT_EQ(ReadFile(dir + "/port"), "") << "it listened";
}

struct OutOfRange {
  std::string name;
  std::vector<std::string> args;      // The binary's name first.
  std::vector<std::string> messages;  // Each is in the output.
};

void PrintTo(const OutOfRange& run, std::ostream* os) { *os << run.name; }

class OutOfRangeFlagTest : public ::testing::TestWithParam<OutOfRange> {};

// Each value was once taken: --lr=-1 and nan trained at 0.001, a negative
// --max_steps ran every epoch, port 70000 listened on 4464 (70000 mod
// 65536) and 2e9 synthetic examples ended in std::bad_alloc (134).
TEST_P(OutOfRangeFlagTest, ExitsTwoNamingTheFlagValueAndRange) {
  const OutOfRange& run = GetParam();
  std::vector<std::string> argv = {kBin + "/" + run.args[0]};
  argv.insert(argv.end(), run.args.begin() + 1, run.args.end());
  const RunResult r = RunProcess(argv, {}, kStartLimit);
  EXPECT_EQ(r.exit_code, kExitPermanent) << r.output;
  for (const std::string& message : run.messages) {
    EXPECT_THAT(r.output, HasSubstr(message));
  }
}

std::vector<std::string> Worker(std::vector<std::string> more) {
  std::vector<std::string> args = {
      "lockstep_worker",       "--servers=127.0.0.1:1",
      "--workers=1",           "--rank=0",
      "--dataset=synthetic",   "--layers=8,4",
      "--connect_timeout_s=30"};
  args.insert(args.end(), more.begin(), more.end());
  return args;
}

INSTANTIATE_TEST_SUITE_P(
    Cases, OutOfRangeFlagTest,
    ::testing::Values(
        OutOfRange{"lr_negative",
                   Worker({"--lr=-1"}),
                   {"--lr must be finite and > 0, got -1"}},
        OutOfRange{"lr_nan",
                   Worker({"--lr=nan"}),
                   {"--lr must be finite and > 0, got nan"}},
        OutOfRange{"lr_zero",
                   Worker({"--lr=0"}),
                   {"--lr must be finite and > 0, got 0"}},
        OutOfRange{"momentum",
                   Worker({"--momentum=-1"}),
                   {"--momentum must be in [0, 1), got -1"}},
        OutOfRange{"weight_decay",
                   Worker({"--weight_decay=-1"}),
                   {"--weight_decay must be finite and >= 0, got -1"}},
        OutOfRange{"max_steps",
                   Worker({"--max_steps=-3"}),
                   {"--max_steps must be >= 0 (0: no limit), got -3"}},
        OutOfRange{"synthetic_examples",
                   Worker({"--synthetic_examples=2000000000"}),
                   {"--synthetic_examples must be in [1, ",
                    "of this machine's memory), got 2000000000"}},
        OutOfRange{
            "listen_port",
            {"lockstep_server", "--listen=127.0.0.1:70000", "--workers=1"},
            {"--listen: the port must be in [0, 65535], got "
             "\"127.0.0.1:70000\""}},
        OutOfRange{"listen_no_port",
                   {"lockstep_server", "--listen=127.0.0.1", "--workers=1"},
                   {"--listen takes HOST:PORT, [V6]:PORT or unix:PATH, got "
                    "\"127.0.0.1\""}}),
    [](const auto& info) { return info.param.name; });

}  // namespace
}  // namespace lockstep
