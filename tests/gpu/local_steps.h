// The local training steps lockstep_gpu_bench measures: replicas of a model,
// each on its own device in its own thread, running upload, forward,
// backward, download and an SGD step on the host -- no server, no network.
#ifndef LOCKSTEP_TESTS_GPU_LOCAL_STEPS_H_
#define LOCKSTEP_TESTS_GPU_LOCAL_STEPS_H_

#include <chrono>
#include <cstddef>
#include <cstdint>
#include <vector>

#include "absl/status/statusor.h"
#include "worker/device/device_factory.h"
#include "worker/model/models.h"

namespace lockstep {
namespace bench {

using Clock = std::chrono::steady_clock;

double SecondsSince(Clock::time_point start);
// Uniform in [-1, 1), and labels in [0, classes), from `seed`.
std::vector<float> RandomFloats(size_t n, uint64_t seed);
std::vector<int32_t> RandomLabels(size_t n, int classes, uint64_t seed);

// What a worker thread trains: `batches` batches of `batch` examples of
// `spec`, cycled through, after `warmup` untimed steps.
struct Workload {
  ModelSpec spec;
  int batch = 64;
  int batches = 16;
  int warmup = 10;
};

// The tutorial MLP (784-128-10, batch 64) and ResNet-50 at 32x32x3.
Workload Tutorial();
Workload ResNet50(int batch);

struct Rate {
  double examples_per_s = 0;
  double ms_per_step = 0;  // Mean over the threads' steps.
};

// The training rate of `threads` replicas of `work`, each on its own device
// made from `options`, over `seconds` once every replica is warm.
absl::StatusOr<Rate> LocalRate(const Workload& work,
                               const DeviceOptions& options, int threads,
                               double seconds);

}  // namespace bench
}  // namespace lockstep

#endif  // LOCKSTEP_TESTS_GPU_LOCAL_STEPS_H_
