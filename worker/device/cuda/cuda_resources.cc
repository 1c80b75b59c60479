#include "worker/device/cuda/cuda_resources.h"

#include <algorithm>

#include "worker/device/cuda/cuda_check.h"

namespace lockstep {
namespace cuda_internal {

absl::StatusOr<DeviceMemory> MakeDeviceMemory(size_t bytes) {
  void* p = nullptr;
  CUDA_RETURN_IF_ERROR(cudaMalloc(&p, std::max<size_t>(bytes, 1)));
  return DeviceMemory(p);
}

absl::StatusOr<PinnedMemory> MakePinnedMemory(size_t bytes) {
  void* p = nullptr;
  CUDA_RETURN_IF_ERROR(
      cudaHostAlloc(&p, std::max<size_t>(bytes, 1), cudaHostAllocPortable));
  return PinnedMemory(p);
}

absl::StatusOr<Stream> MakeStream() {
  cudaStream_t s = nullptr;
  CUDA_RETURN_IF_ERROR(cudaStreamCreateWithFlags(&s, cudaStreamNonBlocking));
  return Stream(s);
}

absl::StatusOr<Event> MakeEvent() {
  cudaEvent_t e = nullptr;
  CUDA_RETURN_IF_ERROR(cudaEventCreateWithFlags(&e, cudaEventDisableTiming));
  return Event(e);
}

absl::StatusOr<CublasHandle> MakeCublasHandle() {
  cublasHandle_t h = nullptr;
  CUDA_RETURN_IF_ERROR(cublasCreate(&h));
  return CublasHandle(h);
}

}  // namespace cuda_internal
}  // namespace lockstep
