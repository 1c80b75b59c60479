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
#include <algorithm>
#include <chrono>
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
#include "common/flags.h"
#include "common/json_writer.h"
#include "common/status_macros.h"
#include "tests/gpu/local_steps.h"
#include "tests/unit/gpu_required.h"
#include "worker/device/device_factory.h"
#include "worker/model/mlp.h"

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

using bench::Clock;
using bench::LocalRate;
using bench::RandomFloats;
using bench::RandomLabels;
using bench::Rate;
using bench::ResNet50;
using bench::SecondsSince;
using bench::Tutorial;

// Flops of forward + backward of an MLP on `batch` rows: per layer the
// forward product and the kernel gradient, plus the input gradient for every
// layer but the first.
double MlpFlops(const std::vector<int>& sizes, int batch) {
  double flops = 0;
  for (size_t i = 0; i + 1 < sizes.size(); ++i) {
    const double product = 2.0 * batch * sizes[i] * sizes[i + 1];
    flops += (i == 0 ? 2 : 3) * product;
  }
  return flops;
}

struct LargeFigures {
  double math_tflops = 0;  // Forward + backward on the device alone.
  double step_tflops = 0;  // Mlp::ComputeGradients, host copies included.
};

// The device math of one forward + backward, the calls Mlp makes, on
// buffers already on the device: no uploads, no gradient download.
absl::Status DeviceMathStep(Device& d, const std::vector<int>& sizes, int n,
                            const std::vector<DeviceBuffer*>& weights,
                            const std::vector<DeviceBuffer*>& acts,
                            DeviceBuffer& bias, DeviceBuffer& labels,
                            DeviceBuffer& delta_a, DeviceBuffer& delta_b,
                            DeviceBuffer& grad) {
  const size_t layers = sizes.size() - 1;
  for (size_t i = 0; i < layers; ++i) {
    float* out = acts[i + 1]->As<float>();
    RETURN_IF_ERROR(d.Gemm(false, false, n, sizes[i + 1], sizes[i], 1.0f,
                           acts[i]->As<float>(), weights[i]->As<float>(), 0.0f,
                           out));
    RETURN_IF_ERROR(d.AddBias(n, sizes[i + 1], bias.As<float>(), out));
    if (i + 1 < layers) {
      RETURN_IF_ERROR(d.ReluForward(size_t{1} * n * sizes[i + 1], out));
    }
  }
  double loss = 0;
  int64_t correct = 0;
  float* delta = delta_a.As<float>();
  float* next = delta_b.As<float>();
  RETURN_IF_ERROR(d.SoftmaxCrossEntropy(
      n, sizes.back(), acts.back()->As<float>(), labels.As<int32_t>(), 1.0f / n,
      delta, &loss, &correct));
  for (size_t i = layers; i-- > 0;) {
    // One scratch gradient buffer serves every layer: the math is the same.
    RETURN_IF_ERROR(d.Gemm(true, false, sizes[i], sizes[i + 1], n, 1.0f,
                           acts[i]->As<float>(), delta, 0.0f,
                           grad.As<float>()));
    RETURN_IF_ERROR(d.BiasGradient(n, sizes[i + 1], delta, grad.As<float>()));
    if (i == 0) break;
    RETURN_IF_ERROR(d.Gemm(false, true, n, sizes[i], sizes[i + 1], 1.0f, delta,
                           weights[i]->As<float>(), 0.0f, next));
    RETURN_IF_ERROR(
        d.ReluBackward(size_t{1} * n * sizes[i], acts[i]->As<float>(), next));
    std::swap(delta, next);
  }
  return d.Synchronize();
}

absl::StatusOr<LargeFigures> LargeMlp(Device& device, int batch, int steps) {
  const std::vector<int> sizes = {8192, 8192, 8192, 10};
  const double flops = MlpFlops(sizes, batch);
  LargeFigures figures;
  const std::vector<float> features =
      RandomFloats(size_t{1} * batch * sizes[0], 3);
  const std::vector<int32_t> labels = RandomLabels(batch, sizes.back(), 4);
  {
    // Math only: weights and activations stay on the device.
    std::vector<std::unique_ptr<DeviceBuffer>> owned;
    std::vector<DeviceBuffer*> weights, acts;
    size_t widest = 0;
    for (size_t i = 0; i < sizes.size(); ++i) {
      ASSIGN_OR_RETURN(auto act, device.Allocate(size_t{4} * batch * sizes[i]));
      acts.push_back(act.get());
      owned.push_back(std::move(act));
      if (i + 1 == sizes.size()) break;
      widest = std::max<size_t>(widest, sizes[i + 1]);
      const std::vector<float> w =
          RandomFloats(size_t{1} * sizes[i] * sizes[i + 1], 10 + i);
      ASSIGN_OR_RETURN(auto buffer, device.Allocate(w.size() * sizeof(float)));
      RETURN_IF_ERROR(
          device.CopyToDevice(w.data(), buffer->data(), w.size() * 4));
      weights.push_back(buffer.get());
      owned.push_back(std::move(buffer));
    }
    RETURN_IF_ERROR(device.CopyToDevice(features.data(), acts[0]->data(),
                                        features.size() * 4));
    ASSIGN_OR_RETURN(auto label_buffer, device.Allocate(labels.size() * 4));
    RETURN_IF_ERROR(device.CopyToDevice(labels.data(), label_buffer->data(),
                                        labels.size() * 4));
    ASSIGN_OR_RETURN(auto bias, device.Allocate(size_t{4} * widest));
    ASSIGN_OR_RETURN(auto delta_a, device.Allocate(size_t{4} * batch * widest));
    ASSIGN_OR_RETURN(auto delta_b, device.Allocate(size_t{4} * batch * widest));
    ASSIGN_OR_RETURN(auto grad, device.Allocate(size_t{4} * 8192 * 8192));
    auto step = [&] {
      return DeviceMathStep(device, sizes, batch, weights, acts, *bias,
                            *label_buffer, *delta_a, *delta_b, *grad);
    };
    RETURN_IF_ERROR(step());  // Warm-up.
    const Clock::time_point t0 = Clock::now();
    for (int i = 0; i < steps; ++i) RETURN_IF_ERROR(step());
    figures.math_tflops = flops * steps / SecondsSince(t0) / 1e12;
  }
  // The model as a worker runs it.
  ASSIGN_OR_RETURN(auto mlp, CreateMlp(sizes, batch, &device));
  std::vector<float> gradient(mlp->NumParameters());
  RETURN_IF_ERROR(mlp->SetWeights(mlp->InitialWeights(5)));
  auto step = [&]() -> absl::Status {
    return mlp->ComputeGradients(features, labels, absl::MakeSpan(gradient))
        .status();
  };
  RETURN_IF_ERROR(step());  // Warm-up.
  const Clock::time_point t0 = Clock::now();
  for (int i = 0; i < steps; ++i) RETURN_IF_ERROR(step());
  figures.step_tflops = flops * steps / SecondsSince(t0) / 1e12;
  return figures;
}

// TFLOP/s of c = a . b, n x n x n, as the device's Gemm (plain cuBLAS sgemm
// on the CUDA device) runs it.
absl::StatusOr<double> SgemmRate(Device& device, int n, int reps) {
  const std::vector<float> host = RandomFloats(size_t{1} * n * n, 6);
  const size_t bytes = host.size() * sizeof(float);
  ASSIGN_OR_RETURN(auto a, device.Allocate(bytes));
  ASSIGN_OR_RETURN(auto b, device.Allocate(bytes));
  ASSIGN_OR_RETURN(auto c, device.Allocate(bytes));
  RETURN_IF_ERROR(device.CopyToDevice(host.data(), a->data(), bytes));
  RETURN_IF_ERROR(device.CopyToDevice(host.data(), b->data(), bytes));
  auto gemm = [&] {
    return device.Gemm(false, false, n, n, n, 1.0f, a->As<float>(),
                       b->As<float>(), 0.0f, c->As<float>());
  };
  for (int i = 0; i < 2; ++i) RETURN_IF_ERROR(gemm());
  RETURN_IF_ERROR(device.Synchronize());
  const Clock::time_point t0 = Clock::now();
  for (int i = 0; i < reps; ++i) RETURN_IF_ERROR(gemm());
  RETURN_IF_ERROR(device.Synchronize());
  return 2.0 * n * n * n * reps / SecondsSince(t0) / 1e12;
}

std::string Figure(double value, const char* format) {
  return value >= 0 ? absl::StrFormat(format, value) : std::string("-");
}

int Main() {
  const double seconds = absl::GetFlag(FLAGS_seconds);
  std::vector<int> thread_counts;
  for (absl::string_view part :
       absl::StrSplit(absl::GetFlag(FLAGS_threads), ',', absl::SkipEmpty())) {
    int t = 0;
    if (!absl::SimpleAtoi(part, &t) || t < 1) {
      std::fprintf(stderr, "--threads must list positive integers\n");
      return 2;
    }
    thread_counts.push_back(t);
  }
  DeviceOptions cpu;
  cpu.kind = "cpu";
  cpu.cpu_threads = 1;
  DeviceOptions cuda;
  cuda.kind = "cuda";
  cuda.gpu = absl::GetFlag(FLAGS_gpu);
  absl::StatusOr<std::unique_ptr<Device>> gpu = CreateDevice(cuda);
  std::unique_ptr<Device> cpu_device = *CreateDevice(cpu);

  std::printf("Lockstep device benchmark: local steps, no parameter server\n");
  std::printf("CPU device: %s per worker thread, %u hardware threads\n",
              cpu_device->Name().c_str(), std::thread::hardware_concurrency());
  int failures = 0;
  if (gpu.ok()) {
    std::printf("GPU device: %s\n", (*gpu)->Name().c_str());
  } else if (GpuRequired()) {
    std::printf("GPU device: FAILED: LOCKSTEP_REQUIRE_GPU=1 but %s\n",
                gpu.status().ToString().c_str());
    ++failures;
  } else {
    std::printf("GPU device: no GPU was found (%s); CPU figures only\n",
                std::string(gpu.status().message()).c_str());
  }
  JsonObjectWriter json;
  json.Add("bench", "lockstep_gpu_bench")
      .Add("cpu_device", cpu_device->Name())
      .Add("gpu_device", gpu.ok() ? (*gpu)->Name() : std::string("none"));

  std::printf(
      "\nTutorial MLP 784-128-10, batch 64: training examples/s\n"
      "(forward + backward + SGD apply per worker thread, each with "
      "its own device; no server)\n");
  std::printf("  %-8s %14s %14s\n", "workers", "cpu", "cuda");
  for (int threads : thread_counts) {
    double rates[2] = {-1, -1};
    for (int d = 0; d < 2; ++d) {
      if (d == 1 && !gpu.ok()) continue;
      absl::StatusOr<Rate> rate =
          LocalRate(Tutorial(), d == 0 ? cpu : cuda, threads, seconds);
      if (!rate.ok()) {
        std::fprintf(stderr, "tutorial %s x%d: %s\n", d == 0 ? "cpu" : "cuda",
                     threads, rate.status().ToString().c_str());
        ++failures;
        continue;
      }
      rates[d] = rate->examples_per_s;
    }
    std::printf("  %-8d %14s %14s\n", threads, Figure(rates[0], "%.0f").c_str(),
                Figure(rates[1], "%.0f").c_str());
    json.Add(absl::StrFormat("tutorial_cpu_%d_examples_per_s", threads),
             rates[0] >= 0 ? rates[0] : std::nan(""));
    json.Add(absl::StrFormat("tutorial_cuda_%d_examples_per_s", threads),
             rates[1] >= 0 ? rates[1] : std::nan(""));
  }

  const int resnet_batch = absl::GetFlag(FLAGS_resnet_batch);
  std::printf(
      "\nResNet-50 (Keras topology) 32x32x3, batch %d: images/s, and ms per "
      "local step\n(weights upload, forward, backward, gradient download, SGD "
      "on the host; the threads share one GPU)\n",
      resnet_batch);
  std::printf("  %-8s %14s %14s %14s %14s\n", "workers", "cpu img/s", "cpu ms",
              "cuda img/s", "cuda ms");
  for (int threads : thread_counts) {
    Rate rates[2] = {{-1, -1}, {-1, -1}};
    for (int d = 0; d < 2; ++d) {
      if (d == 0 && !absl::GetFlag(FLAGS_cpu_resnet)) continue;
      if (d == 1 && !gpu.ok()) continue;
      absl::StatusOr<Rate> rate =
          LocalRate(ResNet50(resnet_batch), d == 0 ? cpu : cuda, threads,
                    absl::GetFlag(FLAGS_resnet_seconds));
      if (!rate.ok()) {
        std::fprintf(stderr, "resnet50 %s x%d: %s\n", d == 0 ? "cpu" : "cuda",
                     threads, rate.status().ToString().c_str());
        ++failures;
        continue;
      }
      rates[d] = *rate;
    }
    std::printf("  %-8d %14s %14s %14s %14s\n", threads,
                Figure(rates[0].examples_per_s, "%.0f").c_str(),
                Figure(rates[0].ms_per_step, "%.1f").c_str(),
                Figure(rates[1].examples_per_s, "%.0f").c_str(),
                Figure(rates[1].ms_per_step, "%.1f").c_str());
    for (int d = 0; d < 2; ++d) {
      const char* kind = d == 0 ? "cpu" : "cuda";
      json.Add(absl::StrFormat("resnet50_%s_%d_images_per_s", kind, threads),
               rates[d].examples_per_s >= 0 ? rates[d].examples_per_s
                                            : std::nan(""));
      json.Add(absl::StrFormat("resnet50_%s_%d_ms_per_step", kind, threads),
               rates[d].ms_per_step >= 0 ? rates[d].ms_per_step : std::nan(""));
    }
  }
  if (!absl::GetFlag(FLAGS_cpu_resnet)) {
    std::printf("  (cpu columns: not run; --cpu_resnet runs them)\n");
  }

  const int batch = absl::GetFlag(FLAGS_large_batch);
  const int steps = absl::GetFlag(FLAGS_large_steps);
  std::printf(
      "\nLarge MLP 8192-8192-8192-10, batch %d: TFLOP/s (%.2f TFLOP "
      "per forward + backward)\n",
      batch, MlpFlops({8192, 8192, 8192, 10}, batch) / 1e12);
  std::printf("  %-40s %10s %10s\n", "", "cpu", "cuda");
  struct Row {
    const char* label;
    const char* key;
    double value[2] = {-1, -1};
  };
  Row rows[] = {{"forward + backward, device math only", "large_math_tflops"},
                {"Mlp::ComputeGradients (+ host copies)", "large_step_tflops"},
                {"sgemm 8192^3 fp32 (Device::Gemm)", "sgemm_fp32_tflops"},
                {"sgemm 8192^3 TF32 (for reference)", "sgemm_tf32_tflops"}};
  for (int d = 0; d < 2; ++d) {
    if (d == 0 && !absl::GetFlag(FLAGS_cpu_large)) continue;
    if (d == 1 && !gpu.ok()) continue;
    Device& device = d == 0 ? *cpu_device : **gpu;
    absl::StatusOr<LargeFigures> large = LargeMlp(device, batch, steps);
    absl::StatusOr<double> fp32 = SgemmRate(device, 8192, d == 0 ? 1 : 10);
    absl::StatusOr<double> tf32 = -1.0;
    if (d == 1) {
      DeviceOptions fast = cuda;
      fast.tf32 = true;
      absl::StatusOr<std::unique_ptr<Device>> tf32_device = CreateDevice(fast);
      tf32 = tf32_device.ok() ? SgemmRate(**tf32_device, 8192, 10)
                              : absl::StatusOr<double>(tf32_device.status());
    }
    for (const absl::Status& s :
         {large.status(), fp32.status(), tf32.status()}) {
      if (!s.ok()) {
        std::fprintf(stderr, "large %s: %s\n", d == 0 ? "cpu" : "cuda",
                     s.ToString().c_str());
        ++failures;
      }
    }
    if (large.ok()) {
      rows[0].value[d] = large->math_tflops;
      rows[1].value[d] = large->step_tflops;
    }
    if (fp32.ok()) rows[2].value[d] = *fp32;
    if (tf32.ok()) rows[3].value[d] = *tf32;
  }
  for (const Row& row : rows) {
    std::printf("  %-40s %10s %10s\n", row.label,
                Figure(row.value[0], "%.2f").c_str(),
                Figure(row.value[1], "%.2f").c_str());
    json.Add(absl::StrCat("cpu_", row.key),
             row.value[0] >= 0 ? row.value[0] : std::nan(""));
    json.Add(absl::StrCat("cuda_", row.key),
             row.value[1] >= 0 ? row.value[1] : std::nan(""));
  }
  if (!absl::GetFlag(FLAGS_cpu_large)) {
    std::printf("  (cpu column: not run; --cpu_large runs it, for minutes)\n");
  }
  if (!gpu.ok()) std::printf("  (cuda column: no GPU was found)\n");

  json.Add("gpu_found", gpu.ok() ? int64_t{1} : int64_t{0})
      .Add("failures", failures);
  // One line, for scripts: the writer pretty-prints one key per line.
  std::printf(
      "\nJSON %s\n",
      absl::StrReplaceAll(json.ToString(),
                          {{"{\n  ", "{"}, {",\n  ", ", "}, {"\n}\n", "}"}})
          .c_str());
  return failures == 0 ? 0 : 1;
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
