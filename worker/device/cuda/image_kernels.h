// Launchers for the CUDA device's image and vector kernels
// (image_kernels.cu), in the manner of kernels.h: each enqueues its kernels
// on `stream` and returns cudaGetLastError(). Shapes are non-empty and
// checked by the caller (worker/device/device_checks.h); pointers are device
// addresses. Every kernel computes each output element from its inputs in
// a fixed order (image_op_elements.h), with no atomics, so results are the
// same on every run.
#ifndef LOCKSTEP_WORKER_DEVICE_CUDA_IMAGE_KERNELS_H_
#define LOCKSTEP_WORKER_DEVICE_CUDA_IMAGE_KERNELS_H_

#include <cuda_runtime_api.h>

#include <cstddef>
#include <cstdint>

#include "worker/device/image_op_elements.h"

namespace lockstep {
namespace cuda_internal {

// y += alpha * x.
cudaError_t LaunchAxpy(size_t n, float alpha, const float* x, float* y,
                       cudaStream_t stream);

// Device::Im2Col and Col2Im.
cudaError_t LaunchIm2Col(const elements::Window& g, const float* image,
                         float* columns, cudaStream_t stream);
cudaError_t LaunchCol2Im(const elements::Window& g, const float* columns,
                         float* image, cudaStream_t stream);

// Device::MaxPoolForward and MaxPoolBackward.
cudaError_t LaunchMaxPoolForward(const elements::Window& g, const float* x,
                                 float* y, int32_t* argmax,
                                 cudaStream_t stream);
cudaError_t LaunchMaxPoolBackward(const elements::Window& g, const float* dy,
                                  const int32_t* argmax, float* dx,
                                  cudaStream_t stream);

// Device::ZeroPad2D and ZeroPad2DBackward.
cudaError_t LaunchZeroPad2D(const elements::Pad& p, const float* x, float* y,
                            cudaStream_t stream);
cudaError_t LaunchZeroPad2DBackward(const elements::Pad& p, const float* dy,
                                    float* dx, cudaStream_t stream);

// Device::GlobalAvgPool and GlobalAvgPoolBackward.
cudaError_t LaunchGlobalAvgPool(int batch, int pixels, int channels,
                                const float* x, float* y, cudaStream_t stream);
cudaError_t LaunchGlobalAvgPoolBackward(int batch, int pixels, int channels,
                                        const float* dy, float* dx,
                                        cudaStream_t stream);

}  // namespace cuda_internal
}  // namespace lockstep

#endif  // LOCKSTEP_WORKER_DEVICE_CUDA_IMAGE_KERNELS_H_
