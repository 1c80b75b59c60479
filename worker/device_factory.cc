#include "worker/device_factory.h"

#include "absl/strings/str_format.h"
#include "worker/cpu_device.h"

namespace lockstep {

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
  if (options.gpu < 0) {
    return absl::InvalidArgumentError(
        absl::StrFormat("gpu must be non-negative, got %d", options.gpu));
  }
  // The CUDA device will be chosen here, behind the build's
  // LOCKSTEP_HAVE_CUDA, for "cuda" and (when a GPU is present) "auto".
  if (options.kind == "cuda") {
    return absl::FailedPreconditionError(
        "this build has no CUDA device (built without the CUDA toolkit)");
  }
  return CpuDevice::Create(options.cpu_threads);
}

}  // namespace lockstep
