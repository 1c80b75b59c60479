// Chooses and creates the worker's compute Device from its options.
#ifndef LOCKSTEP_WORKER_DEVICE_DEVICE_FACTORY_H_
#define LOCKSTEP_WORKER_DEVICE_DEVICE_FACTORY_H_

#include <cstdint>
#include <memory>
#include <string>

#include "absl/status/statusor.h"
#include "worker/device/device.h"

namespace lockstep {

// Which Device a worker computes on; parsed once from flags in main.cc.
struct DeviceOptions {
  // "cpu", "cuda", or "auto" (the GPU when this build and machine have one,
  // else the CPU).
  std::string kind = "auto";
  // CUDA device ordinal; ignored by the CPU device.
  int gpu = 0;
  // Lets cuBLAS use TF32 tensor cores for Gemm (faster, about 1e-3 relative
  // error). Off by default: Gemm then runs in full fp32 and matches the CPU
  // device to rounding. Ignored by the CPU device.
  bool tf32 = false;
  // Threads of the CPU device (OpenBLAS's and its convolutions'); at
  // least 1.
  int cpu_threads = 1;
  // How the CPU device convolves (CpuConv in cpu_device.h): "auto" (its
  // AVX-512 kernels where they win, with AVX-512F, else im2col +
  // OpenBLAS), "direct" (those kernels for every convolution;
  // FAILED_PRECONDITION without AVX-512F) or "im2col". Ignored by the CUDA
  // device.
  std::string cpu_conv = "auto";
};

// The bound on a Conv2D's im2col workspace that suits `device`
// (CpuDevice::kConvWorkspaceFloats on the CPU), or 0 where the layer's
// default suits it (GPUs: few large Gemms).
int64_t ConvWorkspaceFloatsFor(const Device& device);

// The Device `options` asks for. "auto" is the CUDA device when this build
// has it and a GPU is visible, else the CPU device. INVALID_ARGUMENT for an
// unknown kind or bad numbers (a GPU ordinal that does not exist);
// FAILED_PRECONDITION when "cuda" is asked for but this build has no CUDA
// device or no GPU is visible. This is the only place that knows which
// devices were compiled in.
absl::StatusOr<std::unique_ptr<Device>> CreateDevice(
    const DeviceOptions& options);

// Whether this build has the CUDA device (whether or not a GPU is visible).
bool CudaDeviceBuilt();

}  // namespace lockstep

#endif  // LOCKSTEP_WORKER_DEVICE_DEVICE_FACTORY_H_
