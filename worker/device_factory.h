// Chooses and creates the worker's compute Device from its options.
#ifndef LOCKSTEP_WORKER_DEVICE_FACTORY_H_
#define LOCKSTEP_WORKER_DEVICE_FACTORY_H_

#include <memory>
#include <string>

#include "absl/status/statusor.h"
#include "worker/device.h"

namespace lockstep {

// Which Device a worker computes on; parsed once from flags in main.cc.
struct DeviceOptions {
  // "cpu", "cuda", or "auto" (the GPU when this build and machine have one,
  // else the CPU).
  std::string kind = "auto";
  // CUDA device ordinal; ignored by the CPU device.
  int gpu = 0;
  // OpenBLAS threads for the CPU device; at least 1.
  int cpu_threads = 1;
};

// The Device `options` asks for. INVALID_ARGUMENT for an unknown kind or bad
// numbers; FAILED_PRECONDITION when the kind is not available in this build.
// This is the only place that knows which devices were compiled in.
absl::StatusOr<std::unique_ptr<Device>> CreateDevice(
    const DeviceOptions& options);

}  // namespace lockstep

#endif  // LOCKSTEP_WORKER_DEVICE_FACTORY_H_
