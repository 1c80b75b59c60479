// `lockstep_bench server`: a server shard's own work at memory speed.
//
// Times, in this process, over arrays larger than the caches, with the
// code paths a shard runs (common/wire/wire_codec.h's checked sum and
// common/optim/optimizer.h's ApplyMean, split by common/base/work_pool.h as
// ChunkBarrier splits them):
//   copy, triad        STREAM's kernels (a = b; a = b + q c), the yardstick;
//   accumulate         sum += push, checked for NaN/Inf first, fp32 and bf16
//                      payloads (and fp32 unchecked, to price the check);
//   sgd, momentum, adam  the optimizer's step from the summed gradient;
// for each thread count and kernel variant (common/kernels/kernels.h). Rates are
// reported two ways: payload (the gradient bytes a push carries, per
// second) and memory traffic counted as STREAM counts it (every array each
// loop must read or write, once per element), whose ratio to triad's at
// the same thread count says how close a loop is to the memory's speed.
#ifndef LOCKSTEP_TESTS_BENCH_SERVER_BENCH_H_
#define LOCKSTEP_TESTS_BENCH_SERVER_BENCH_H_

#include <cstdint>
#include <cstdio>
#include <string>
#include <vector>

#include "absl/status/statusor.h"

namespace lockstep {

struct ServerBenchOptions {
  int64_t elements = 25'600'000;  // fp32 values: ResNet-50's size.
  std::vector<int> threads;       // Empty: 1, 2, 4, ... up to the cores.
  int reps = 5;                   // Timed passes per figure (median).
  // Variants to time at one thread (common/kernels/kernels.h names); empty: every
  // one this CPU runs. The thread sweep uses the active variant.
  std::vector<std::string> variants;
};

struct ServerBenchRow {
  std::string kernel;   // "copy", "triad", "accumulate fp32", ...
  std::string variant;  // Kernel variant.
  int threads = 1;
  double median_seconds = 0;  // One pass over every element.
  double payload_gbps = 0;    // Gradient bytes per second (0: copy, triad).
  double traffic_gbps = 0;    // STREAM-counted bytes per second.
  double of_triad = 0;        // traffic_gbps / triad's, same threads/variant.
};

struct ServerBenchResult {
  ServerBenchOptions options;
  std::string active_variant;
  int cores = 1;
  std::vector<ServerBenchRow> rows;
};

absl::StatusOr<ServerBenchResult> RunServerBench(
    const ServerBenchOptions& options);
void PrintServerTable(const ServerBenchResult& result, std::FILE* out);
std::string ServerResultJson(const ServerBenchResult& result);

}  // namespace lockstep

#endif  // LOCKSTEP_TESTS_BENCH_SERVER_BENCH_H_
