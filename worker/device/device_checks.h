// Argument checks shared by every Device implementation, so that CPU and
// CUDA refuse the same bad calls with the same messages.
//
// The image and batch-norm checks return the number of elements the call
// computes: 0 means the call is a no-op (its pointers may then be null), and
// a status that is not OK means it must not touch memory.
#ifndef LOCKSTEP_WORKER_DEVICE_DEVICE_CHECKS_H_
#define LOCKSTEP_WORKER_DEVICE_DEVICE_CHECKS_H_

#include <cstddef>
#include <cstdint>

#include "absl/status/status.h"
#include "absl/status/statusor.h"
#include "worker/device/image_geometry.h"

namespace lockstep {

// The dense ops. Each returns the number of elements the call computes
// (0: a no-op, whose pointers may be null); a pointer may be null only when
// nothing is read or written through it.
// Copies (CopyToDevice, CopyToHost, CopyToHostAsync; `op` names which):
// `bytes` bytes.
absl::StatusOr<int64_t> CheckCopyArgs(const char* op, size_t bytes,
                                      const void* src, const void* dst);
// Gemm: c is m x n, a m x k, b k x n (before op); m * n.
absl::StatusOr<int64_t> CheckGemmArgs(int m, int n, int k, const float* a,
                                      const float* b, const float* c);
// AddBias: rows * cols.
absl::StatusOr<int64_t> CheckAddBiasArgs(int rows, int cols, const float* bias,
                                         const float* x);
// ReluForward(Into) (x, y) and ReluBackward(Into) (activation, dy, dx): n.
absl::StatusOr<int64_t> CheckReluForwardArgs(size_t n, const float* x,
                                             const float* y);
absl::StatusOr<int64_t> CheckReluBackwardArgs(size_t n, const float* activation,
                                              const float* dy, const float* dx);
// BiasGradient: cols (zero rows still write zeros).
absl::StatusOr<int64_t> CheckBiasGradientArgs(int rows, int cols,
                                              const float* grad,
                                              const float* bias_grad);

// Device::SoftmaxCrossEntropy's shape and pointer rules. With zero rows the
// call is a no-op and the data pointers may be null.
absl::Status CheckSoftmaxCrossEntropyArgs(int rows, int cols,
                                          const float* logits,
                                          const int32_t* labels,
                                          const double* loss_sum,
                                          const int64_t* correct);

// Axpy and CopyOnDevice: `count` elements or bytes; OK with null pointers
// when count is 0.
absl::Status CheckAxpyArgs(size_t n, const float* x, const float* y);
absl::Status CheckCopyOnDeviceArgs(size_t bytes, const void* src,
                                   const void* dst);

// The elements of `columns` (Im2Col) or of `image` (Col2Im) to compute.
absl::StatusOr<int64_t> CheckIm2ColArgs(const WindowGeometry& window,
                                        const float* image,
                                        const float* columns);
absl::StatusOr<int64_t> CheckCol2ImArgs(const WindowGeometry& window,
                                        const float* columns,
                                        const float* image);
// Direct convolution (worker/device/cpu/cpu_conv.h): `window` describes x (dx),
// `filters` is at least 1, and the kernel is window_height x window_width x
// channels x filters. The count is of the outputs (forward), the input
// gradients (backward data) or the kernel gradients (backward filter); the
// inputs may be null when nothing is read from them.
absl::StatusOr<int64_t> CheckConvForwardArgs(const WindowGeometry& window,
                                             int filters, const float* x,
                                             const float* kernel,
                                             const float* y);
absl::StatusOr<int64_t> CheckConvBackwardDataArgs(const WindowGeometry& window,
                                                  int filters, const float* dy,
                                                  const float* kernel,
                                                  const float* dx);
absl::StatusOr<int64_t> CheckConvBackwardFilterArgs(
    const WindowGeometry& window, int filters, const float* x, const float* dy,
    const float* kernel_grad);
// The outputs (MaxPoolForward) or input gradients (MaxPoolBackward) to
// compute; images must have fewer than 2^31 elements (argmax is int32).
absl::StatusOr<int64_t> CheckMaxPoolForwardArgs(const WindowGeometry& window,
                                                const float* x, const float* y,
                                                const int32_t* argmax);
absl::StatusOr<int64_t> CheckMaxPoolBackwardArgs(const WindowGeometry& window,
                                                 const float* dy,
                                                 const int32_t* argmax,
                                                 const float* dx);
// Elements of the padded output (ZeroPad2D) or of dx (ZeroPad2DBackward).
absl::StatusOr<int64_t> CheckZeroPad2DArgs(const NhwcShape& x_shape,
                                           const Padding2D& padding,
                                           const float* x, const float* y);
absl::StatusOr<int64_t> CheckZeroPad2DBackwardArgs(const NhwcShape& x_shape,
                                                   const Padding2D& padding,
                                                   const float* dy,
                                                   const float* dx);
// batch * channels (GlobalAvgPool) or batch * pixels * channels (backward).
absl::StatusOr<int64_t> CheckGlobalAvgPoolArgs(const char* op, int batch,
                                               int pixels, int channels,
                                               const float* in,
                                               const float* out, bool backward);
// The channels to compute (0: nothing to do); training and backward need at
// least one row.
absl::StatusOr<int64_t> CheckBatchNormTrainingArgs(
    int rows, int channels, const float* x, const float* gamma,
    const float* beta, const float* y, const float* moving_mean,
    const float* moving_variance, const float* saved_mean,
    const float* saved_inv_std);
// rows * channels.
absl::StatusOr<int64_t> CheckBatchNormInferenceArgs(
    int rows, int channels, const float* x, const float* gamma,
    const float* beta, const float* moving_mean, const float* moving_variance,
    const float* y);
// The channels (dx may be null: then only dgamma and dbeta are computed).
absl::StatusOr<int64_t> CheckBatchNormBackwardArgs(
    int rows, int channels, const float* x, const float* dy, const float* gamma,
    const float* saved_mean, const float* saved_inv_std, const float* dgamma,
    const float* dbeta);

}  // namespace lockstep

#endif  // LOCKSTEP_WORKER_DEVICE_DEVICE_CHECKS_H_
