#include "worker/device/cuda/cuda_check.h"

#include <cstring>

#include "absl/strings/str_format.h"

namespace lockstep {
namespace cuda_internal {
namespace {

// __FILE__ is an absolute path under CMake; keep it from "worker/" on, so
// messages read the same on every machine.
const char* ShortFile(const char* file) {
  const char* p = std::strstr(file, "worker/device/cuda/");
  return p != nullptr ? p : file;
}

absl::StatusCode CodeOf(cudaError_t error) {
  switch (error) {
    case cudaErrorMemoryAllocation:
      return absl::StatusCode::kResourceExhausted;
    case cudaErrorNoDevice:
    case cudaErrorInsufficientDriver:
    case cudaErrorInvalidDevice:
    case cudaErrorDevicesUnavailable:
      return absl::StatusCode::kFailedPrecondition;
    case cudaErrorInvalidValue:
      return absl::StatusCode::kInvalidArgument;
    default:
      return absl::StatusCode::kInternal;
  }
}

absl::StatusCode CodeOf(cublasStatus_t status) {
  switch (status) {
    case CUBLAS_STATUS_ALLOC_FAILED:
      return absl::StatusCode::kResourceExhausted;
    case CUBLAS_STATUS_NOT_INITIALIZED:
    case CUBLAS_STATUS_ARCH_MISMATCH:
    case CUBLAS_STATUS_NOT_SUPPORTED:
      return absl::StatusCode::kFailedPrecondition;
    case CUBLAS_STATUS_INVALID_VALUE:
      return absl::StatusCode::kInvalidArgument;
    default:
      return absl::StatusCode::kInternal;
  }
}

}  // namespace

absl::Status ToStatus(cudaError_t error, const char* expr, const char* file,
                      int line) {
  if (error == cudaSuccess) return absl::OkStatus();
  // Reported here, once: a later launcher's cudaGetLastError() must not
  // pick it up again.
  cudaGetLastError();
  return absl::Status(
      CodeOf(error),
      absl::StrFormat("%s failed: %s (%s) at %s:%d", expr,
                      cudaGetErrorString(error), cudaGetErrorName(error),
                      ShortFile(file), line));
}

absl::Status ToStatus(cublasStatus_t status, const char* expr, const char* file,
                      int line) {
  if (status == CUBLAS_STATUS_SUCCESS) return absl::OkStatus();
  return absl::Status(
      CodeOf(status),
      absl::StrFormat("%s failed: %s (%s) at %s:%d", expr,
                      cublasGetStatusString(status),
                      cublasGetStatusName(status), ShortFile(file), line));
}

}  // namespace cuda_internal
}  // namespace lockstep
