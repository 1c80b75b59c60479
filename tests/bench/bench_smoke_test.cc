// Checks that lockstep_bench runs and reports what it promises. It asserts
// no timing: the figures only have to exist and be positive, and the bytes
// moved, which do not depend on speed, must be exact.
#include <signal.h>
#include <sys/wait.h>
#include <unistd.h>

#include <atomic>
#include <string>
#include <thread>
#include <vector>

#include "absl/strings/str_cat.h"
#include "gtest/gtest.h"
#include "tests/bench/bench_util.h"
#include "tests/bench/comm_worker.h"
#include "tests/integration/subprocess.h"
#include "worker/device/cpu/cpu_conv.h"

namespace lockstep {
namespace {

const std::string kBench = std::string(LOCKSTEP_BIN_DIR) + "/lockstep_bench";

TEST(BenchUtilTest, QuantileInterpolates) {
  EXPECT_EQ(Median({3, 1, 2}), 2);
  EXPECT_EQ(Median({4, 1, 3, 2}), 2.5);
  EXPECT_DOUBLE_EQ(Quantile({1, 2, 3, 4, 5, 6, 7, 8, 9, 10, 11}, 0.9), 10);
  EXPECT_EQ(Quantile({}, 0.5), 0);
}

TEST(BenchUtilTest, FindsNumbersInOtherProgramsOutput) {
  const std::string iperf = R"({"intervals": [{"sum": {"bits_per_second": 1}}],
    "end": {"sum_received": {"bytes": 9, "bits_per_second": 2.5e10},
            "sum_received_bidir_reverse": {"bits_per_second": 3e9}}})";
  EXPECT_EQ(*FindJsonNumber(iperf, {"end", "sum_received", "bits_per_second"}),
            2.5e10);
  EXPECT_EQ(*FindJsonNumber(iperf, {"end", "sum_received_bidir_reverse",
                                    "bits_per_second"}),
            3e9);
  EXPECT_FALSE(FindJsonNumber(iperf, {"end", "sum_sent"}).ok());
  const std::string line =
      "gloo-allreduce workers=2 n=100 median_s=0.0831 algbw_GBps=1.2\n";
  EXPECT_EQ(*FindKeyValueNumber(line, "median_s"), 0.0831);
  EXPECT_EQ(*FindKeyValueNumber("a x_n=1 n=7", "n"), 7);
  EXPECT_FALSE(FindKeyValueNumber(line, "median_step_s").ok());
  EXPECT_EQ(UntagLines("[a] one\n[b] two\n[a] three\n", "a"), "one\nthree\n");
}

// `lockstep_bench server` on a small array: every kernel at every thread
// count asked for, each variant at one thread, a positive figure in each,
// and triad as the 100% of its own thread count.
TEST(BenchSmokeTest, ServerTimesEveryKernel) {
  const std::string json = MakeTempDir() + "/server.json";
  const RunResult run =
      RunProcess({kBench, "server", "--params=600000", "--reps=1",
                  "--thread_counts=1,2", "--json=" + json},
                 {}, absl::Seconds(120));
  ASSERT_EQ(run.exit_code, 0) << run.output;
  const std::string text = ReadFile(json);
  for (const char* kernel :
       {"copy", "triad", "accumulate fp32", "accumulate fp32 unchecked",
        "accumulate bf16", "sgd", "momentum", "adam"}) {
    EXPECT_NE(text.find(absl::StrCat("\"kernel\": \"", kernel, "\"")),
              std::string::npos)
        << kernel;
  }
  ASSERT_TRUE(FindJsonNumber(text, {"elements"}).ok()) << text;
  EXPECT_EQ(*FindJsonNumber(text, {"elements"}), 600000);
  // 8 kernels at 1 and 2 threads with the active variant, plus 8 at one
  // thread for each other variant this CPU runs.
  size_t rows = 0;
  for (size_t at = text.find("\"kernel\""); at != std::string::npos;
       at = text.find("\"kernel\"", at + 1)) {
    ++rows;
  }
  EXPECT_EQ(rows % 8, 0u) << text;
  EXPECT_GE(rows, 16u) << text;
  EXPECT_EQ(text.find("\"median_seconds\": 0,"), std::string::npos) << text;
}

TEST(BenchUtilTest, WorkerResultRoundTrips) {
  CommWorkerResult result;
  result.step_seconds = {0.5, 0.25};
  result.timings.steps = 2;
  result.timings.encode_seconds = 0.125;
  result.timings.send_seconds = 1;
  result.timings.wait_seconds = 2;
  result.timings.decode_seconds = 3;
  absl::StatusOr<CommWorkerResult> parsed =
      ParseWorkerResult(FormatWorkerResult(result));
  ASSERT_TRUE(parsed.ok()) << parsed.status();
  EXPECT_EQ(parsed->step_seconds, result.step_seconds);
  EXPECT_EQ(parsed->timings.steps, 2);
  EXPECT_EQ(parsed->timings.encode_seconds, 0.125);
  EXPECT_EQ(parsed->timings.decode_seconds, 3);
  EXPECT_FALSE(ParseWorkerResult("step_seconds 1\n").ok());
}

// The CI failure of 4b41bac: a comm-worker killed by its own go signal.
// lockstep_bench links OpenBLAS, whose threads start before main with every
// signal open to them; a go signal that came while the main thread was not
// yet waiting went to one of them and ended the process. Here a thread from
// before PrepareGoSignal stands for them, and the signal comes early.
TEST(BenchUtilTest, AnEarlyGoSignalIsKeptWhicheverThreadItReaches) {
  const pid_t child = fork();
  ASSERT_GE(child, 0);
  if (child == 0) {
    std::atomic<bool> done{false};
    std::thread library_thread([&done] {
      while (!done.load()) usleep(1000);
    });
    PrepareGoSignal();
    kill(getpid(), kGoSignal);
    usleep(50 * 1000);  // Time for the signal to land before the wait.
    const bool went = WaitForGo(absl::Seconds(5)).ok();
    const bool timed_out = !WaitForGo(absl::Milliseconds(20)).ok();  // Once.
    done = true;
    library_thread.join();
    _exit(went && timed_out ? 0 : 3);
  }
  int status = 0;
  ASSERT_EQ(waitpid(child, &status, 0), child);
  EXPECT_TRUE(WIFEXITED(status))
      << "killed by signal " << (WIFSIGNALED(status) ? WTERMSIG(status) : 0);
  EXPECT_EQ(WIFEXITED(status) ? WEXITSTATUS(status) : -1, 0);
}

TEST(BenchSmokeTest, CommReportsEveryFigure) {
  const std::string json = MakeTempDir() + "/comm.json";
  const RunResult run =
      RunProcess({kBench, "comm", "--params=1000", "--workers=2", "--ps=2",
                  "--iters=3", "--warmup=1", "--json=" + json},
                 {}, absl::Seconds(120));
  ASSERT_EQ(run.exit_code, 0) << run.output;
  const std::string text = ReadFile(json);
  for (const char* key :
       {"median_step_seconds", "p90_step_seconds", "mean_step_seconds",
        "bytes_per_step", "algbw_gbps", "model_bytes", "client_encode_seconds",
        "client_send_seconds", "client_wait_seconds", "client_decode_seconds",
        "server_accumulate_seconds", "server_apply_seconds",
        "server_peak_rss_bytes"}) {
    absl::StatusOr<double> value = FindJsonNumber(text, {key});
    ASSERT_TRUE(value.ok()) << key << " missing from:\n" << text;
    EXPECT_GT(*value, 0) << key;
  }
  ASSERT_TRUE(FindJsonNumber(text, {"server_barrier_wait_seconds"}).ok());
  // Each step, each of 2 workers sends and receives 1000 fp32 values.
  EXPECT_EQ(*FindJsonNumber(text, {"bytes_per_step"}), 2 * 2 * 1000 * 4);
  EXPECT_EQ(*FindJsonNumber(text, {"model_bytes"}), 4000);
  EXPECT_NE(run.output.find("median"), std::string::npos) << run.output;
}

TEST(BenchSmokeTest, ConvTimesEveryConvolutionBothWays) {
  if (!cpu_ops::DirectConvAvailable()) GTEST_SKIP() << "no AVX-512F here";
  const std::string json = MakeTempDir() + "/conv.json";
  const RunResult run =
      RunProcess({kBench, "conv", "--model=cnn", "--batch=2", "--rounds=1",
                  "--threads=2", "--json=" + json},
                 {}, absl::Seconds(120));
  ASSERT_EQ(run.exit_code, 0) << run.output;
  const std::string text = ReadFile(json);
  std::vector<std::string> keys = {"direct_total_ms", "im2col_total_ms",
                                   "chosen_total_ms"};
  const absl::StatusOr<double> rows = FindJsonNumber(text, {"rows"});
  ASSERT_TRUE(rows.ok()) << text;
  EXPECT_GE(*rows, 2) << "the CNN has two convolutions";
  for (int i = 0; i < *rows; ++i) {
    keys.push_back(absl::StrCat("row", i, "_direct_ms"));
    keys.push_back(absl::StrCat("row", i, "_im2col_ms"));
  }
  for (const std::string& key : keys) {
    absl::StatusOr<double> value = FindJsonNumber(text, {key});
    ASSERT_TRUE(value.ok()) << key << " missing from:\n" << text;
    EXPECT_GT(*value, 0) << key;
  }
  EXPECT_EQ(*FindJsonNumber(text, {"threads"}), 2);
  // The CNN's first convolution needs no input gradient.
  EXPECT_NE(run.output.find("(no dx)"), std::string::npos) << run.output;
  EXPECT_NE(run.output.find("device uses"), std::string::npos) << run.output;

  const RunResult mlp =
      RunProcess({kBench, "conv", "--model=mlp"}, {}, absl::Seconds(60));
  EXPECT_EQ(mlp.exit_code, 2) << mlp.output;  // A bad --model.
  EXPECT_NE(mlp.output.find("graph models"), std::string::npos) << mlp.output;
}

TEST(BenchSmokeTest, RefusesBadFlags) {
  const RunResult run =
      RunProcess({kBench, "comm", "--workers=0"}, {}, absl::Seconds(30));
  EXPECT_EQ(run.exit_code, 2) << run.output;
  EXPECT_NE(run.output.find("--workers"), std::string::npos) << run.output;
}

}  // namespace
}  // namespace lockstep
