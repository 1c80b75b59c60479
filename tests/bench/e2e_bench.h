// `lockstep_bench e2e`: whole training runs through lockstep_launch.
#ifndef LOCKSTEP_TESTS_BENCH_E2E_BENCH_H_
#define LOCKSTEP_TESTS_BENCH_E2E_BENCH_H_

#include <cstdio>
#include <string>
#include <vector>

#include "absl/status/statusor.h"
#include "absl/time/time.h"

namespace lockstep {

struct E2eOptions {
  int runs = 3;
  int workers = 2;
  int ps = 1;
  // Worker (and launcher) flags after ours, so that they win; see
  // DefaultE2eArgs for ours.
  std::vector<std::string> extra_args;
  std::string bin_dir;  // Holds lockstep_launch and its siblings.
  int interrupt_fd = -1;
  absl::Duration timeout = absl::Seconds(600);  // Per run.
};

// The tutorial run: MLP 784-128-10 with Adam on Fashion-MNIST, batch 64 per
// worker, two epochs, no progress output.
std::vector<std::string> DefaultE2eArgs();

struct E2eRun {
  double examples_per_sec = 0;  // All workers, over the training loop.
  double test_accuracy = 0;
  double wall_seconds = 0;    // Training loop of rank 0.
  double launch_seconds = 0;  // The whole lockstep_launch run.
};

struct E2eResult {
  E2eOptions options;
  std::vector<E2eRun> runs;
  double median_examples_per_sec = 0;
  double median_test_accuracy = 0;
  double load_average_before = 0;  // 1-minute, /proc/loadavg.
  double load_average_after = 0;
};

// One lockstep_launch run; its output goes to `log_dir`/e2e.<index>.log.
absl::StatusOr<E2eRun> RunE2eOnce(const E2eOptions& options,
                                  const std::string& log_dir, int index);
absl::StatusOr<E2eResult> RunE2eBench(const E2eOptions& options);

std::string E2eResultJson(const E2eResult& result);
void PrintE2eTable(const E2eResult& result, std::FILE* out);

}  // namespace lockstep

#endif  // LOCKSTEP_TESTS_BENCH_E2E_BENCH_H_
