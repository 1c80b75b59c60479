// The CUDA device's ops for convolutional networks: image ops, batch norm,
// Axpy and device-to-device copies. Each checks its arguments with
// worker/device/device_checks.h, as the CPU device does, and enqueues the
// kernels of image_kernels.h or batch_norm_kernels.h on the compute stream.
#include <cuda_runtime_api.h>

#include <cstddef>
#include <cstdint>

#include "common/base/status_macros.h"
#include "worker/device/cuda/batch_norm_kernels.h"
#include "worker/device/cuda/cuda_check.h"
#include "worker/device/cuda/cuda_device_impl.h"
#include "worker/device/cuda/image_kernels.h"
#include "worker/device/device_checks.h"
#include "worker/device/image_geometry.h"

namespace lockstep {
namespace cuda_internal {

absl::Status CudaDevice::Axpy(size_t n, float alpha, const float* x, float* y) {
  RETURN_IF_ERROR(CheckAxpyArgs(n, x, y));
  return Enqueue("LaunchAxpy", static_cast<int64_t>(n),
                 [&](cudaStream_t s) { return LaunchAxpy(n, alpha, x, y, s); });
}

absl::Status CudaDevice::CopyOnDevice(const void* src, void* dst,
                                      size_t bytes) {
  RETURN_IF_ERROR(CheckCopyOnDeviceArgs(bytes, src, dst));
  if (bytes == 0) return absl::OkStatus();
  RETURN_IF_ERROR(Activate());
  CUDA_RETURN_IF_ERROR(cudaMemcpyAsync(
      dst, src, bytes, cudaMemcpyDeviceToDevice, compute_.get()));
  return absl::OkStatus();
}

absl::Status CudaDevice::Im2Col(const WindowGeometry& window,
                                const float* image, float* columns) {
  return Enqueue("LaunchIm2Col", CheckIm2ColArgs(window, image, columns),
                 [&](cudaStream_t s) {
                   return LaunchIm2Col(ToElements(window), image, columns, s);
                 });
}

absl::Status CudaDevice::Col2Im(const WindowGeometry& window,
                                const float* columns, float* image) {
  return Enqueue("LaunchCol2Im", CheckCol2ImArgs(window, columns, image),
                 [&](cudaStream_t s) {
                   return LaunchCol2Im(ToElements(window), columns, image, s);
                 });
}

absl::Status CudaDevice::MaxPoolForward(const WindowGeometry& window,
                                        const float* x, float* y,
                                        int32_t* argmax) {
  return Enqueue(
      "LaunchMaxPoolForward", CheckMaxPoolForwardArgs(window, x, y, argmax),
      [&](cudaStream_t s) {
        return LaunchMaxPoolForward(ToElements(window), x, y, argmax, s);
      });
}

absl::Status CudaDevice::MaxPoolBackward(const WindowGeometry& window,
                                         const float* dy, const int32_t* argmax,
                                         float* dx) {
  // A gather: each dx element sums the outputs whose argmax names it, so an
  // argmax that names nothing in its window is ignored rather than written
  // through (the CPU device, which scatters, refuses out-of-image ones).
  return Enqueue(
      "LaunchMaxPoolBackward", CheckMaxPoolBackwardArgs(window, dy, argmax, dx),
      [&](cudaStream_t s) {
        return LaunchMaxPoolBackward(ToElements(window), dy, argmax, dx, s);
      });
}

absl::Status CudaDevice::ZeroPad2D(const NhwcShape& x_shape,
                                   const Padding2D& padding, const float* x,
                                   float* y) {
  return Enqueue("LaunchZeroPad2D", CheckZeroPad2DArgs(x_shape, padding, x, y),
                 [&](cudaStream_t s) {
                   return LaunchZeroPad2D(ToElements(x_shape, padding), x, y,
                                          s);
                 });
}

absl::Status CudaDevice::ZeroPad2DBackward(const NhwcShape& x_shape,
                                           const Padding2D& padding,
                                           const float* dy, float* dx) {
  return Enqueue("LaunchZeroPad2DBackward",
                 CheckZeroPad2DBackwardArgs(x_shape, padding, dy, dx),
                 [&](cudaStream_t s) {
                   return LaunchZeroPad2DBackward(ToElements(x_shape, padding),
                                                  dy, dx, s);
                 });
}

absl::Status CudaDevice::GlobalAvgPool(int batch, int pixels, int channels,
                                       const float* x, float* y) {
  return Enqueue("LaunchGlobalAvgPool",
                 CheckGlobalAvgPoolArgs("GlobalAvgPool", batch, pixels,
                                        channels, x, y, /*backward=*/false),
                 [&](cudaStream_t s) {
                   return LaunchGlobalAvgPool(batch, pixels, channels, x, y, s);
                 });
}

absl::Status CudaDevice::GlobalAvgPoolBackward(int batch, int pixels,
                                               int channels, const float* dy,
                                               float* dx) {
  return Enqueue("LaunchGlobalAvgPoolBackward",
                 CheckGlobalAvgPoolArgs("GlobalAvgPoolBackward", batch, pixels,
                                        channels, dy, dx, /*backward=*/true),
                 [&](cudaStream_t s) {
                   return LaunchGlobalAvgPoolBackward(batch, pixels, channels,
                                                      dy, dx, s);
                 });
}

absl::Status CudaDevice::ReserveScratch(size_t bytes) {
  if (bytes <= scratch_bytes_) return absl::OkStatus();
  // The kernels queued so far may still use the old scratch.
  CUDA_RETURN_IF_ERROR(cudaStreamSynchronize(compute_.get()));
  scratch_.reset();
  scratch_bytes_ = 0;
  ASSIGN_OR_RETURN(scratch_, MakeDeviceMemory(bytes));
  scratch_bytes_ = bytes;
  return absl::OkStatus();
}

absl::Status CudaDevice::BatchNormTraining(
    int rows, int channels, const float* x, const float* gamma,
    const float* beta, float epsilon, float momentum, float* y,
    float* moving_mean, float* moving_variance, float* saved_mean,
    float* saved_inv_std) {
  ASSIGN_OR_RETURN(
      const int64_t work,
      CheckBatchNormTrainingArgs(rows, channels, x, gamma, beta, y, moving_mean,
                                 moving_variance, saved_mean, saved_inv_std));
  if (work == 0) return absl::OkStatus();
  RETURN_IF_ERROR(Activate());
  RETURN_IF_ERROR(ReserveScratch(BatchNormScratchBytes(rows, channels)));
  CUDA_RETURN_IF_ERROR(
      LaunchBatchNormTraining(rows, channels, x, gamma, beta, epsilon, momentum,
                              y, moving_mean, moving_variance, saved_mean,
                              saved_inv_std, scratch_.get(), compute_.get()));
  return absl::OkStatus();
}

absl::Status CudaDevice::BatchNormInference(int rows, int channels,
                                            const float* x, const float* gamma,
                                            const float* beta,
                                            const float* moving_mean,
                                            const float* moving_variance,
                                            float epsilon, float* y) {
  ASSIGN_OR_RETURN(const int64_t work, CheckBatchNormInferenceArgs(
                                           rows, channels, x, gamma, beta,
                                           moving_mean, moving_variance, y));
  if (work == 0) return absl::OkStatus();
  RETURN_IF_ERROR(Activate());
  RETURN_IF_ERROR(ReserveScratch(BatchNormScratchBytes(rows, channels)));
  CUDA_RETURN_IF_ERROR(LaunchBatchNormInference(
      rows, channels, x, gamma, beta, moving_mean, moving_variance, epsilon, y,
      scratch_.get(), compute_.get()));
  return absl::OkStatus();
}

absl::Status CudaDevice::BatchNormBackward(
    int rows, int channels, const float* x, const float* dy, const float* gamma,
    const float* saved_mean, const float* saved_inv_std, float* dx,
    float* dgamma, float* dbeta) {
  ASSIGN_OR_RETURN(
      const int64_t work,
      CheckBatchNormBackwardArgs(rows, channels, x, dy, gamma, saved_mean,
                                 saved_inv_std, dgamma, dbeta));
  if (work == 0) return absl::OkStatus();
  RETURN_IF_ERROR(Activate());
  RETURN_IF_ERROR(ReserveScratch(BatchNormScratchBytes(rows, channels)));
  CUDA_RETURN_IF_ERROR(LaunchBatchNormBackward(
      rows, channels, x, dy, gamma, saved_mean, saved_inv_std, dx, dgamma,
      dbeta, scratch_.get(), compute_.get()));
  return absl::OkStatus();
}

}  // namespace cuda_internal
}  // namespace lockstep
