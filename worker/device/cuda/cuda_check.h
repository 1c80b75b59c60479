// The one place where CUDA runtime and cuBLAS errors become absl::Status.
//
// Every CUDA or cuBLAS call in worker/device/cuda goes through
// CUDA_RETURN_IF_ERROR, which names the failed expression, the error and the file and line, in the
// manner of nccl-tests' CUDACHECK:
//
//   CUDA_RETURN_IF_ERROR(cudaMalloc(&p, bytes));
//   CUDA_RETURN_IF_ERROR(cublasSgemm(handle, ...));
//
// Kernel launchers (kernels.h) return cudaGetLastError()'s cudaError_t, so
// they are checked the same way.
#ifndef LOCKSTEP_WORKER_DEVICE_CUDA_CUDA_CHECK_H_
#define LOCKSTEP_WORKER_DEVICE_CUDA_CUDA_CHECK_H_

#include <cublas_v2.h>
#include <cuda_runtime_api.h>

#include "absl/status/status.h"

namespace lockstep {
namespace cuda_internal {

// OK for cudaSuccess / CUBLAS_STATUS_SUCCESS. Otherwise a status whose code
// follows the error (out of memory: RESOURCE_EXHAUSTED; no device or driver:
// FAILED_PRECONDITION; a bad argument: INVALID_ARGUMENT; else INTERNAL) and
// whose message holds `expr`, the error's name and text, and file:line.
absl::Status ToStatus(cudaError_t error, const char* expr, const char* file,
                      int line);
absl::Status ToStatus(cublasStatus_t status, const char* expr, const char* file,
                      int line);

}  // namespace cuda_internal
}  // namespace lockstep

// Returns the converted status from the enclosing function when `expr` (a
// cudaError_t or cublasStatus_t) is not success.
#define CUDA_RETURN_IF_ERROR(expr)                                   \
  do {                                                               \
    ::absl::Status lockstep_cuda_status_ =                           \
        ::lockstep::cuda_internal::ToStatus((expr), #expr, __FILE__, \
                                            __LINE__);               \
    if (!lockstep_cuda_status_.ok()) return lockstep_cuda_status_;   \
  } while (0)

#endif  // LOCKSTEP_WORKER_DEVICE_CUDA_CUDA_CHECK_H_
