#include "worker/device/device_factory.h"

#include "absl/strings/str_format.h"
#include "worker/device/cpu/cpu_conv.h"
#include "worker/device/cpu/cpu_device.h"
// The one #if for CUDA; CMake defines it when it builds worker/device/cuda.
#if LOCKSTEP_HAVE_CUDA
#include "worker/device/cuda/cuda_device.h"
#endif

namespace lockstep {

int64_t ConvWorkspaceFloatsFor(const Device& device) {
  if (dynamic_cast<const CpuDevice*>(&device) != nullptr) {
    return CpuDevice::kConvWorkspaceFloats;
  }
  return 0;
}

absl::StatusOr<std::unique_ptr<Device>> CreateDevice(
    const DeviceOptions& options) {
  if (options.kind != "cpu" && options.kind != "cuda" &&
      options.kind != "auto") {
    return absl::InvalidArgumentError(absl::StrFormat(
        "unknown device kind \"%s\" (want cpu, cuda or auto)", options.kind));
  }
  if (options.cpu_threads < 1) {
    return absl::InvalidArgumentError(absl::StrFormat(
        "cpu_threads must be at least 1, got %d", options.cpu_threads));
  }
  if (options.cpu_conv != "auto" && options.cpu_conv != "direct" &&
      options.cpu_conv != "im2col") {
    return absl::InvalidArgumentError(
        absl::StrFormat("unknown cpu_conv \"%s\" (want auto, direct or im2col)",
                        options.cpu_conv));
  }
  if (options.cpu_conv == "direct" && !cpu_ops::DirectConvAvailable()) {
    return absl::FailedPreconditionError(
        "cpu_conv=direct: this processor has no AVX-512F for the direct "
        "convolutions (use auto or im2col)");
  }
  if (options.gpu < 0) {
    return absl::InvalidArgumentError(
        absl::StrFormat("gpu must be non-negative, got %d", options.gpu));
  }
#if LOCKSTEP_HAVE_CUDA
  if (options.kind == "cuda" ||
      (options.kind == "auto" && CudaDeviceCount() > 0)) {
    return CreateCudaDevice(options.gpu, options.tf32);
  }
#else
  if (options.kind == "cuda") {
    return absl::FailedPreconditionError(
        "this build has no CUDA device (built without the CUDA toolkit or "
        "with -DLOCKSTEP_CUDA=OFF)");
  }
#endif
  const CpuConv conv = options.cpu_conv == "direct"   ? CpuConv::kDirect
                       : options.cpu_conv == "im2col" ? CpuConv::kIm2Col
                                                      : CpuConv::kAuto;
  return CpuDevice::Create(options.cpu_threads, conv);
}

bool CudaDeviceBuilt() {
#if LOCKSTEP_HAVE_CUDA
  return true;
#else
  return false;
#endif
}

}  // namespace lockstep
