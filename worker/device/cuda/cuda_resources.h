// Owning handles for the CUDA objects the CUDA device holds: device memory,
// page-locked host memory, streams, events and the cuBLAS handle.
//
// Each is a std::unique_ptr with a deleter that calls the matching destroy
// function, so nothing in worker/device/cuda frees a resource by hand. The
// Make* functions report failure as absl::Status through CUDA_RETURN_IF_ERROR.
// Destroy functions' errors are ignored: there is nobody to tell, and a
// failing destroy means the context is already gone.
#ifndef LOCKSTEP_WORKER_DEVICE_CUDA_CUDA_RESOURCES_H_
#define LOCKSTEP_WORKER_DEVICE_CUDA_CUDA_RESOURCES_H_

#include <cublas_v2.h>
#include <cuda_runtime_api.h>

#include <cstddef>
#include <memory>
#include <type_traits>

#include "absl/status/statusor.h"

namespace lockstep {
namespace cuda_internal {

struct DeviceMemoryDeleter {
  void operator()(void* p) const { cudaFree(p); }
};
struct PinnedMemoryDeleter {
  void operator()(void* p) const { cudaFreeHost(p); }
};
struct StreamDeleter {
  void operator()(cudaStream_t s) const { cudaStreamDestroy(s); }
};
struct EventDeleter {
  void operator()(cudaEvent_t e) const { cudaEventDestroy(e); }
};
struct CublasDeleter {
  void operator()(cublasHandle_t h) const { cublasDestroy(h); }
};

using DeviceMemory = std::unique_ptr<void, DeviceMemoryDeleter>;
using PinnedMemory = std::unique_ptr<void, PinnedMemoryDeleter>;
using Stream =
    std::unique_ptr<std::remove_pointer_t<cudaStream_t>, StreamDeleter>;
using Event = std::unique_ptr<std::remove_pointer_t<cudaEvent_t>, EventDeleter>;
using CublasHandle =
    std::unique_ptr<std::remove_pointer_t<cublasHandle_t>, CublasDeleter>;

// cudaMalloc on the current device; at least one byte, so every allocation
// has its own address. Not zeroed.
absl::StatusOr<DeviceMemory> MakeDeviceMemory(size_t bytes);
// cudaHostAlloc (portable, page-locked); at least one byte. Not zeroed.
absl::StatusOr<PinnedMemory> MakePinnedMemory(size_t bytes);
// A stream that does not synchronize with the legacy default stream.
absl::StatusOr<Stream> MakeStream();
// An event for ordering only (no timing).
absl::StatusOr<Event> MakeEvent();
absl::StatusOr<CublasHandle> MakeCublasHandle();

}  // namespace cuda_internal
}  // namespace lockstep

#endif  // LOCKSTEP_WORKER_DEVICE_CUDA_CUDA_RESOURCES_H_
