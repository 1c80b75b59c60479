// `lockstep_bench conv`: every convolution of a model, forward and backward
// through its Conv2D layer on the CPU device, once with the device's direct
// AVX-512 kernels and once with im2col + OpenBLAS, alternated side by side.
// The figures behind CpuDevice::HasDirectConv's rule.
#ifndef LOCKSTEP_TESTS_BENCH_CONV_BENCH_H_
#define LOCKSTEP_TESTS_BENCH_CONV_BENCH_H_

#include <cstdio>
#include <string>
#include <vector>

#include "absl/status/statusor.h"

namespace lockstep {

struct ConvBenchOptions {
  std::string model = "resnet20";
  int batch = 32;
  int reps = 5;     // Alternated rounds; each figure is their median.
  int threads = 1;  // The devices' threads (--cpu_threads).
};

// One geometry of the model's convolutions (several layers may share it).
struct ConvBenchRow {
  // "32x32x16 3x3/1 pad 1,1 -> 32x32x16", with " (no dx)" where training
  // needs no input gradient (the first convolution).
  std::string geometry;
  int layers = 0;        // How many of the model's layers have it.
  double direct_ms = 0;  // Median forward + backward of one layer.
  double im2col_ms = 0;
  // What the default device does with this geometry: "direct", "im2col",
  // or "gemm" (a 1x1 stride-1 kernel where the direct kernels lose: one
  // Gemm, no unfolding).
  std::string chosen;
};

struct ConvBenchResult {
  ConvBenchOptions options;
  std::vector<ConvBenchRow> rows;
  // Over all the model's convolution layers, per step.
  double direct_total_ms = 0;  // Direct wherever the kernels can.
  double im2col_total_ms = 0;
  double chosen_total_ms = 0;  // As the device chooses.
  double load_average = 0;     // 1-minute, at the start.
};

// FAILED_PRECONDITION where the processor has no AVX-512F; INVALID_ARGUMENT
// for a model without convolutions or bad options.
absl::StatusOr<ConvBenchResult> RunConvBench(const ConvBenchOptions& options);

std::string ConvResultJson(const ConvBenchResult& result);
void PrintConvTable(const ConvBenchResult& result, std::FILE* out);

}  // namespace lockstep

#endif  // LOCKSTEP_TESTS_BENCH_CONV_BENCH_H_
