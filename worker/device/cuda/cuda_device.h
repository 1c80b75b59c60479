// The CUDA implementation of Device: cuBLAS for Gemm, the kernels of
// kernels.cu for the rest, memory and streams on one GPU.
//
// This header is plain host C++ (no CUDA headers), so code outside
// worker/device/cuda can create the device; only
// worker/device/device_factory.cc does, and the GPU tests.
//
// The device runs its math on one compute stream and device-to-host copies
// queued with CopyToHostAsync on a second stream, so a layer's gradient
// travels to the host while the layers below it are still being computed.
// Gemm is exact fp32 unless `tf32` is set, when cuBLAS may use TF32 tensor
// cores (about 1e-3 relative error, several times faster on Ampere and
// Hopper). Like every Device it is externally synchronized; several devices
// on the same GPU (one per worker thread) are independent.
#ifndef LOCKSTEP_WORKER_DEVICE_CUDA_CUDA_DEVICE_H_
#define LOCKSTEP_WORKER_DEVICE_CUDA_CUDA_DEVICE_H_

#include <memory>

#include "absl/status/statusor.h"
#include "worker/device/device.h"

namespace lockstep {

// The number of CUDA GPUs this process can see: 0 when there is none, no
// driver, or the driver is older than the runtime.
int CudaDeviceCount();

// The CUDA device on GPU `gpu` (an ordinal, 0-based). FAILED_PRECONDITION
// when no GPU is visible (with the runtime's reason); INVALID_ARGUMENT when
// `gpu` is not below CudaDeviceCount().
absl::StatusOr<std::unique_ptr<Device>> CreateCudaDevice(int gpu, bool tf32);

}  // namespace lockstep

#endif  // LOCKSTEP_WORKER_DEVICE_CUDA_CUDA_DEVICE_H_
