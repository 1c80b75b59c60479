// Launchers for the CUDA device's batch-norm kernels
// (batch_norm_kernels.cu), in the manner of kernels.h: each enqueues its
// kernels on `stream` and returns cudaGetLastError(). Shapes are non-empty
// and checked by the caller (worker/device/device_checks.h); pointers are
// device addresses. Per-channel sums go in two fixed-order steps (tiles of rows,
// then one warp per channel), with no atomics, so results are the same on
// every run; the arithmetic is image_op_elements.h's.
#ifndef LOCKSTEP_WORKER_DEVICE_CUDA_BATCH_NORM_KERNELS_H_
#define LOCKSTEP_WORKER_DEVICE_CUDA_BATCH_NORM_KERNELS_H_

#include <cuda_runtime_api.h>

#include <cstddef>

#include "worker/device/image_op_elements.h"

namespace lockstep {
namespace cuda_internal {

// Bytes of scratch the batch-norm launchers need for `rows` x `channels`:
// partial sums per tile of rows, and per-channel numbers.
size_t BatchNormScratchBytes(int rows, int channels);

// Device::BatchNormTraining, BatchNormInference and BatchNormBackward, with
// `scratch` of BatchNormScratchBytes(rows, channels) bytes (256-byte
// aligned, as cudaMalloc gives) that no other queued work uses.
cudaError_t LaunchBatchNormTraining(int rows, int channels, const float* x,
                                    const float* gamma, const float* beta,
                                    float epsilon, float momentum, float* y,
                                    float* moving_mean, float* moving_variance,
                                    float* saved_mean, float* saved_inv_std,
                                    void* scratch, cudaStream_t stream);
cudaError_t LaunchBatchNormInference(int rows, int channels, const float* x,
                                     const float* gamma, const float* beta,
                                     const float* moving_mean,
                                     const float* moving_variance,
                                     float epsilon, float* y, void* scratch,
                                     cudaStream_t stream);
// bias_grad[c] = the sum over r of grad[r][c] (Device::BiasGradient), in
// double, by the batch-norm sums' two steps: tiles of rows on many blocks,
// so that a convolution's few wide columns (64 channels of 128 x 16 x 16
// rows, say) do not leave all but two multiprocessors idle. `scratch` of
// BiasGradientScratchBytes(rows, cols) bytes, as above; rows may be 0.
size_t BiasGradientScratchBytes(int rows, int cols);
cudaError_t LaunchBiasGradient(int rows, int cols, const float* grad,
                               float* bias_grad, void* scratch,
                               cudaStream_t stream);

cudaError_t LaunchBatchNormBackward(int rows, int channels, const float* x,
                                    const float* dy, const float* gamma,
                                    const float* saved_mean,
                                    const float* saved_inv_std, float* dx,
                                    float* dgamma, float* dbeta, void* scratch,
                                    cudaStream_t stream);

}  // namespace cuda_internal
}  // namespace lockstep

#endif  // LOCKSTEP_WORKER_DEVICE_CUDA_BATCH_NORM_KERNELS_H_
