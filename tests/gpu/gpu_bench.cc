// lockstep_gpu_bench: what the compute devices deliver, without a server.
//
// 1. The tutorial MLP (784-128-10, batch 64): training examples per second
//    of local steps -- upload weights, forward, backward, download the
//    gradient, SGD on the host -- with 1 and 4 worker threads, each with its
//    own device, on the CPU device and on GPU 0. No parameter server and no
//    network: this is the compute side of a worker's step only.
// 2. The tutorial's ResNet-50 (Keras topology, 32x32x3, batch 128): images
//    per second and milliseconds per step of the same local steps, with 1
//    and 4 worker threads sharing GPU 0 (the CPU column only with
//    --cpu_resnet: seconds per step). tests/gpu/device_check.sh compares
//    these with whole synchronous steps through a real server.
// 3. A large MLP (8192-8192-8192-10, batch 4096) on the GPU: forward +
//    backward TFLOP/s, of the device math alone and of Mlp::ComputeGradients
//    (which adds the batch upload and the 537 MB gradient download), next to
//    cuBLAS's own sgemm rate on 8192^3 (fp32, and TF32 for reference) in the
//    same run.
//
// Prints a table and then one JSON line ("JSON {...}"). Without a GPU it
// prints the CPU figures, says that no GPU was found and exits 0.
#include <cmath>
#include <cstdint>
#include <cstdio>
#include <memory>
#include <string>
#include <thread>
#include <vector>

#include "absl/flags/flag.h"
#include "absl/flags/usage.h"
#include "absl/status/statusor.h"
#include "absl/strings/numbers.h"
#include "absl/strings/str_cat.h"
#include "absl/strings/str_format.h"
#include "absl/strings/str_replace.h"
#include "absl/strings/str_split.h"
#include "common/flags/flags.h"
#include "common/formats/json_writer.h"
#include "tests/gpu/large_mlp.h"
#include "tests/gpu/local_steps.h"
#include "tests/unit/gpu_required.h"
#include "worker/device/device_factory.h"

ABSL_FLAG(double, seconds, 2.0, "Timed seconds per tutorial measurement.");
ABSL_FLAG(std::string, threads, "1,4", "Worker thread counts to measure.");
ABSL_FLAG(int, large_batch, 4096, "Batch of the large MLP.");
ABSL_FLAG(int, large_steps, 5, "Timed steps of the large MLP.");
ABSL_FLAG(bool, cpu_large, false,
          "Also run the large MLP and sgemm on the CPU device (minutes).");
ABSL_FLAG(int, resnet_batch, 128, "Batch of the ResNet-50 measurement.");
ABSL_FLAG(double, resnet_seconds, 5.0,
          "Timed seconds per ResNet-50 measurement.");
ABSL_FLAG(bool, cpu_resnet, false,
          "Also measure ResNet-50 on the CPU device (seconds per step).");
ABSL_FLAG(int, gpu, 0, "CUDA GPU ordinal.");

namespace lockstep {
namespace {

using bench::LargeFigures;
using bench::LargeMlp;
using bench::LocalRate;
using bench::MlpFlops;
using bench::Rate;
using bench::ResNet50;
using bench::SgemmRate;
using bench::Tutorial;
using bench::Workload;

std::string Figure(double value, const char* format) {
  return value >= 0 ? absl::StrFormat(format, value) : std::string("-");
}

// The devices the benchmark measures and what it has found so far.
struct Bench {
  std::vector<int> thread_counts;
  DeviceOptions cpu, cuda;
  absl::StatusOr<std::unique_ptr<Device>> gpu;
  std::unique_ptr<Device> cpu_device;
  JsonObjectWriter json;
  int failures = 0;
};

// --threads as positive integers; false when it lists anything else.
bool ParseThreadCounts(std::vector<int>* thread_counts) {
  for (absl::string_view part :
       absl::StrSplit(absl::GetFlag(FLAGS_threads), ',', absl::SkipEmpty())) {
    int t = 0;
    if (!absl::SimpleAtoi(part, &t) || t < 1) return false;
    thread_counts->push_back(t);
  }
  return true;
}

// Makes the CPU device and GPU `--gpu`, and prints and records which they are.
void OpenDevices(Bench& bench) {
  bench.cpu.kind = "cpu";
  bench.cpu.cpu_threads = 1;
  bench.cuda.kind = "cuda";
  bench.cuda.gpu = absl::GetFlag(FLAGS_gpu);
  bench.gpu = CreateDevice(bench.cuda);
  bench.cpu_device = *CreateDevice(bench.cpu);
  const absl::StatusOr<std::unique_ptr<Device>>& gpu = bench.gpu;

  std::printf("Lockstep device benchmark: local steps, no parameter server\n");
  std::printf("CPU device: %s per worker thread, %u hardware threads\n",
              bench.cpu_device->Name().c_str(),
              std::thread::hardware_concurrency());
  if (gpu.ok()) {
    std::printf("GPU device: %s\n", (*gpu)->Name().c_str());
  } else if (GpuRequired()) {
    std::printf("GPU device: FAILED: LOCKSTEP_REQUIRE_GPU=1 but %s\n",
                gpu.status().ToString().c_str());
    ++bench.failures;
  } else {
    std::printf("GPU device: no GPU was found (%s); CPU figures only\n",
                std::string(gpu.status().message()).c_str());
  }
  bench.json.Add("bench", "lockstep_gpu_bench")
      .Add("cpu_device", bench.cpu_device->Name())
      .Add("gpu_device", gpu.ok() ? (*gpu)->Name() : std::string("none"));
}

// The local training rate of `work` on device d (0: cpu, 1: cuda) with
// `threads` workers; a failure is printed and counted.
absl::StatusOr<Rate> MeasureRate(Bench& bench, const char* what,
                                 const Workload& work, int d, int threads,
                                 double seconds) {
  absl::StatusOr<Rate> rate =
      LocalRate(work, d == 0 ? bench.cpu : bench.cuda, threads, seconds);
  if (!rate.ok()) {
    std::fprintf(stderr, "%s %s x%d: %s\n", what, d == 0 ? "cpu" : "cuda",
                 threads, rate.status().ToString().c_str());
    ++bench.failures;
  }
  return rate;
}

// A measured figure for the JSON line; NaN where it was not measured.
double JsonFigure(double value) { return value >= 0 ? value : std::nan(""); }

void RunTutorial(Bench& bench) {
  std::printf(
      "\nTutorial MLP 784-128-10, batch 64: training examples/s\n"
      "(forward + backward + SGD apply per worker thread, each with "
      "its own device; no server)\n");
  std::printf("  %-8s %14s %14s\n", "workers", "cpu", "cuda");
  for (int threads : bench.thread_counts) {
    double rates[2] = {-1, -1};
    for (int d = 0; d < 2; ++d) {
      if (d == 1 && !bench.gpu.ok()) continue;
      absl::StatusOr<Rate> rate =
          MeasureRate(bench, "tutorial", Tutorial(), d, threads,
                      absl::GetFlag(FLAGS_seconds));
      if (rate.ok()) rates[d] = rate->examples_per_s;
    }
    std::printf("  %-8d %14s %14s\n", threads, Figure(rates[0], "%.0f").c_str(),
                Figure(rates[1], "%.0f").c_str());
    bench.json.Add(absl::StrFormat("tutorial_cpu_%d_examples_per_s", threads),
                   JsonFigure(rates[0]));
    bench.json.Add(absl::StrFormat("tutorial_cuda_%d_examples_per_s", threads),
                   JsonFigure(rates[1]));
  }
}

void RunResNet(Bench& bench) {
  const int resnet_batch = absl::GetFlag(FLAGS_resnet_batch);
  std::printf(
      "\nResNet-50 (Keras topology) 32x32x3, batch %d: images/s, and ms per "
      "local step\n(weights upload, forward, backward, gradient download, SGD "
      "on the host; the threads share one GPU)\n",
      resnet_batch);
  std::printf("  %-8s %14s %14s %14s %14s\n", "workers", "cpu img/s", "cpu ms",
              "cuda img/s", "cuda ms");
  for (int threads : bench.thread_counts) {
    Rate rates[2] = {{-1, -1}, {-1, -1}};
    for (int d = 0; d < 2; ++d) {
      if (d == 0 && !absl::GetFlag(FLAGS_cpu_resnet)) continue;
      if (d == 1 && !bench.gpu.ok()) continue;
      absl::StatusOr<Rate> rate =
          MeasureRate(bench, "resnet50", ResNet50(resnet_batch), d, threads,
                      absl::GetFlag(FLAGS_resnet_seconds));
      if (rate.ok()) rates[d] = *rate;
    }
    std::printf("  %-8d %14s %14s %14s %14s\n", threads,
                Figure(rates[0].examples_per_s, "%.0f").c_str(),
                Figure(rates[0].ms_per_step, "%.1f").c_str(),
                Figure(rates[1].examples_per_s, "%.0f").c_str(),
                Figure(rates[1].ms_per_step, "%.1f").c_str());
    for (int d = 0; d < 2; ++d) {
      const char* kind = d == 0 ? "cpu" : "cuda";
      bench.json.Add(
          absl::StrFormat("resnet50_%s_%d_images_per_s", kind, threads),
          JsonFigure(rates[d].examples_per_s));
      bench.json.Add(
          absl::StrFormat("resnet50_%s_%d_ms_per_step", kind, threads),
          JsonFigure(rates[d].ms_per_step));
    }
  }
  if (!absl::GetFlag(FLAGS_cpu_resnet)) {
    std::printf("  (cpu columns: not run; --cpu_resnet runs them)\n");
  }
}

// One row of the large-MLP table: its figure on the cpu and the cuda device.
struct LargeRow {
  const char* label;
  const char* key;
  double value[2] = {-1, -1};
};

// Fills column d (0: cpu, 1: cuda) of the large-MLP table.
void MeasureLarge(Bench& bench, int d, LargeRow* rows) {
  Device& device = d == 0 ? *bench.cpu_device : **bench.gpu;
  absl::StatusOr<LargeFigures> large =
      LargeMlp(device, absl::GetFlag(FLAGS_large_batch),
               absl::GetFlag(FLAGS_large_steps));
  absl::StatusOr<double> fp32 = SgemmRate(device, 8192, d == 0 ? 1 : 10);
  absl::StatusOr<double> tf32 = -1.0;
  if (d == 1) {
    DeviceOptions fast = bench.cuda;
    fast.tf32 = true;
    absl::StatusOr<std::unique_ptr<Device>> tf32_device = CreateDevice(fast);
    tf32 = tf32_device.ok() ? SgemmRate(**tf32_device, 8192, 10)
                            : absl::StatusOr<double>(tf32_device.status());
  }
  for (const absl::Status& s : {large.status(), fp32.status(), tf32.status()}) {
    if (!s.ok()) {
      std::fprintf(stderr, "large %s: %s\n", d == 0 ? "cpu" : "cuda",
                   s.ToString().c_str());
      ++bench.failures;
    }
  }
  if (large.ok()) {
    rows[0].value[d] = large->math_tflops;
    rows[1].value[d] = large->step_tflops;
  }
  if (fp32.ok()) rows[2].value[d] = *fp32;
  if (tf32.ok()) rows[3].value[d] = *tf32;
}

void RunLarge(Bench& bench) {
  const int batch = absl::GetFlag(FLAGS_large_batch);
  std::printf(
      "\nLarge MLP 8192-8192-8192-10, batch %d: TFLOP/s (%.2f TFLOP "
      "per forward + backward)\n",
      batch, MlpFlops({8192, 8192, 8192, 10}, batch) / 1e12);
  std::printf("  %-40s %10s %10s\n", "", "cpu", "cuda");
  LargeRow rows[] = {
      {"forward + backward, device math only", "large_math_tflops"},
      {"Mlp::ComputeGradients (+ host copies)", "large_step_tflops"},
      {"sgemm 8192^3 fp32 (Device::Gemm)", "sgemm_fp32_tflops"},
      {"sgemm 8192^3 TF32 (for reference)", "sgemm_tf32_tflops"}};
  if (absl::GetFlag(FLAGS_cpu_large)) MeasureLarge(bench, 0, rows);
  if (bench.gpu.ok()) MeasureLarge(bench, 1, rows);
  for (const LargeRow& row : rows) {
    std::printf("  %-40s %10s %10s\n", row.label,
                Figure(row.value[0], "%.2f").c_str(),
                Figure(row.value[1], "%.2f").c_str());
    bench.json.Add(absl::StrCat("cpu_", row.key), JsonFigure(row.value[0]));
    bench.json.Add(absl::StrCat("cuda_", row.key), JsonFigure(row.value[1]));
  }
  if (!absl::GetFlag(FLAGS_cpu_large)) {
    std::printf("  (cpu column: not run; --cpu_large runs it, for minutes)\n");
  }
  if (!bench.gpu.ok()) std::printf("  (cuda column: no GPU was found)\n");
}

int Main() {
  Bench bench;
  if (!ParseThreadCounts(&bench.thread_counts)) {
    std::fprintf(stderr, "--threads must list positive integers\n");
    return 2;
  }
  OpenDevices(bench);
  RunTutorial(bench);
  RunResNet(bench);
  RunLarge(bench);
  bench.json.Add("gpu_found", bench.gpu.ok() ? int64_t{1} : int64_t{0})
      .Add("failures", bench.failures);
  // One line, for scripts: the writer pretty-prints one key per line.
  std::printf(
      "\nJSON %s\n",
      absl::StrReplaceAll(bench.json.ToString(),
                          {{"{\n  ", "{"}, {",\n  ", ", "}, {"\n}\n", "}"}})
          .c_str());
  return bench.failures == 0 ? 0 : 1;
}

}  // namespace
}  // namespace lockstep

int main(int argc, char** argv) {
  absl::SetProgramUsageMessage(
      "Measures the CPU and CUDA devices: the tutorial MLP's and ResNet-50's "
      "local training rates and a large MLP's TFLOP/s next to cuBLAS sgemm. "
      "No server.");
  lockstep::ParseFlags(argc, argv, {"tests/gpu/gpu_bench.cc"});
  return lockstep::Main();
}
