// The compute device a worker runs its model on.
//
// Device is the only seam between the model code and the hardware: the CPU
// device (OpenBLAS) and the CUDA device (cuBLAS + kernels) implement it. All
// pointers passed to the math calls point into DeviceBuffers of the same
// device (host memory for the CPU device, GPU memory for CUDA). Math calls
// may run asynchronously on the device's stream; CopyToHost and
// Synchronize() wait for them. Host data crosses fastest through buffers from
// AllocateHost (page-locked for CUDA), and CopyToHostAsync lets a copy run
// while later math calls compute. Matrices are row-major.
//
// A Device is externally synchronized: one worker thread uses it at a time.
#ifndef LOCKSTEP_WORKER_DEVICE_DEVICE_H_
#define LOCKSTEP_WORKER_DEVICE_DEVICE_H_

#include <cstddef>
#include <cstdint>
#include <memory>
#include <string>

#include "absl/status/status.h"
#include "absl/status/statusor.h"
#include "absl/types/span.h"
#include "worker/device/image_geometry.h"

namespace lockstep {

// Memory owned by a Device: from Allocate, the address is in the device's
// space; from AllocateHost, in the host's. Destroy buffers before their
// Device.
class DeviceBuffer {
 public:
  virtual ~DeviceBuffer() = default;
  virtual void* data() = 0;
  virtual const void* data() const = 0;
  virtual size_t bytes() const = 0;

  template <typename T>
  T* As() { return static_cast<T*>(data()); }
  template <typename T>
  const T* As() const { return static_cast<const T*>(data()); }
};

class Device {
 public:
  virtual ~Device() = default;

  // For example "cpu (OpenBLAS, 1 thread)".
  virtual std::string Name() const = 0;

  // Zero-initialized memory of `bytes` bytes.
  virtual absl::StatusOr<std::unique_ptr<DeviceBuffer>> Allocate(
      size_t bytes) = 0;

  // Whether Allocate's buffers are host memory the host may read once the
  // queued work is done (the CPU device's), so results need no staging copy.
  virtual bool BuffersAreHostMemory() const { return false; }

  // Zero-initialized host memory of `bytes` bytes for staging copies:
  // page-locked on CUDA (so copies are DMA and CopyToHostAsync overlaps
  // compute), plain aligned memory on the CPU device.
  virtual absl::StatusOr<std::unique_ptr<DeviceBuffer>> AllocateHost(
      size_t bytes) = 0;

  // Host -> device copy of `bytes` bytes to `dst` (a device address), after
  // the work already queued; `src` may be reused once it returns.
  virtual absl::Status CopyToDevice(const void* src, void* dst,
                                    size_t bytes) = 0;
  // Device -> host copy; returns once the data is on the host.
  virtual absl::Status CopyToHost(const void* src, void* dst,
                                  size_t bytes) = 0;
  // Device -> host copy queued after the work already queued; returns at
  // once, and the data is on the host after Synchronize(). Until then the
  // caller must not read or write `dst` nor write `src`. With `dst` from
  // AllocateHost the copy runs while later math calls compute.
  virtual absl::Status CopyToHostAsync(const void* src, void* dst,
                                       size_t bytes) = 0;

  // c[m x n] = alpha * op(a) * op(b) + beta * c, where op(a) is m x k and
  // op(b) is k x n; trans_* transposes the stored row-major matrix.
  virtual absl::Status Gemm(bool trans_a, bool trans_b, int m, int n, int k,
                            float alpha, const float* a, const float* b,
                            float beta, float* c) = 0;

  // x[r][c] += bias[c] for a rows x cols matrix x.
  virtual absl::Status AddBias(int rows, int cols, const float* bias,
                               float* x) = 0;

  // x = max(x, 0), n elements, in place.
  virtual absl::Status ReluForward(size_t n, float* x) = 0;
  // y = max(x, 0) into another buffer (y may also be x). By default a copy
  // and ReluForward; a device may do it in one pass.
  virtual absl::Status ReluForwardInto(size_t n, const float* x, float* y) {
    if (y != x) {
      if (absl::Status s = CopyOnDevice(x, y, n * sizeof(float)); !s.ok()) {
        return s;
      }
    }
    return ReluForward(n, y);
  }

  // grad *= (activation > 0), n elements; `activation` is ReLU's output.
  virtual absl::Status ReluBackward(size_t n, const float* activation,
                                    float* grad) = 0;
  // dx = dy where activation > 0, else 0: ReluBackward into another
  // buffer (dx may also be dy). By default a copy and ReluBackward; a
  // device may do it in one pass.
  virtual absl::Status ReluBackwardInto(size_t n, const float* activation,
                                        const float* dy, float* dx) {
    if (dx != dy) {
      if (absl::Status s = CopyOnDevice(dy, dx, n * sizeof(float)); !s.ok()) {
        return s;
      }
    }
    return ReluBackward(n, activation, dx);
  }

  // bias_grad[c] = sum over r of grad[r][c].
  virtual absl::Status BiasGradient(int rows, int cols, const float* grad,
                                    float* bias_grad) = 0;

  // Softmax cross-entropy of `logits` (rows x cols) against integer class
  // `labels` (rows entries in [0, cols)). Adds the summed loss over rows to
  // *loss_sum and the number of rows whose arg-max equals the label to
  // *correct (host values; the call waits for them). When grad_logits is not
  // null it receives (softmax - one_hot) * grad_scale.
  virtual absl::Status SoftmaxCrossEntropy(int rows, int cols,
                                           const float* logits,
                                           const int32_t* labels,
                                           float grad_scale,
                                           float* grad_logits,
                                           double* loss_sum,
                                           int64_t* correct) = 0;

  // y += alpha * x, n elements.
  virtual absl::Status Axpy(size_t n, float alpha, const float* x,
                            float* y) = 0;

  // Device -> device copy of `bytes` bytes, queued like the math calls.
  virtual absl::Status CopyOnDevice(const void* src, void* dst,
                                    size_t bytes) = 0;

  // ---- Image ops over NHWC batches (see image_geometry.h) ----

  // The im2col matrix of `image` (window.input): one row per output pixel
  // (n, oh, ow), holding the window's pixels in (i, j, c) order, zero where
  // the window lies in the padding. Its product with a kernel stored
  // [window_height, window_width, channels, filters] (Keras's layout) is the
  // convolution. `columns` holds OutputPixels() x PatchSize() floats.
  virtual absl::Status Im2Col(const WindowGeometry& window, const float* image,
                              float* columns) = 0;
  // The adjoint of Im2Col: `image` is overwritten with, at every pixel, the
  // sum of the column entries read from it (zero where none were).
  virtual absl::Status Col2Im(const WindowGeometry& window,
                              const float* columns, float* image) = 0;

  // Convolution in one call, for a device with kernels of its own (the
  // CPU device's AVX-512 ones, worker/device/cpu/cpu_conv.h). HasDirectConv
  // says whether ConvForward, ConvBackwardData and ConvBackwardFilter run
  // `window` with `filters` output channels; where it does not, Conv2D
  // builds the convolution from Im2Col and Gemm, and these calls return
  // UNIMPLEMENTED. The kernel is stored as for Im2Col:
  //   y[n][oh][ow][f] = sum over (i, j, c) of
  //     x[n][oh * stride_height - pad_top + i][ow * stride_width - pad_left
  //       + j][c] * kernel[i][j][c][f]   (zero outside the image);
  // `window` describes x, y holds OutputPixels() x filters floats.
  virtual bool HasDirectConv(const WindowGeometry& window, int filters) const {
    return false;
  }
  virtual absl::Status ConvForward(const WindowGeometry& window, int filters,
                                   const float* x, const float* kernel,
                                   float* y) {
    return absl::UnimplementedError("ConvForward: no direct convolution");
  }
  // dx (overwritten) = the gradient of the sum with respect to x, given dy.
  virtual absl::Status ConvBackwardData(const WindowGeometry& window,
                                        int filters, const float* dy,
                                        const float* kernel, float* dx) {
    return absl::UnimplementedError("ConvBackwardData: no direct convolution");
  }
  // kernel_grad (overwritten) = the gradient with respect to the kernel,
  // summed over the batch.
  virtual absl::Status ConvBackwardFilter(const WindowGeometry& window,
                                          int filters, const float* x,
                                          const float* dy,
                                          float* kernel_grad) {
    return absl::UnimplementedError(
        "ConvBackwardFilter: no direct convolution");
  }

  // Max pooling: y[n][oh][ow][c] is the largest x[n][h][w][c] over the
  // window's pixels inside the image (padding never wins, as in TensorFlow;
  // ties go to the first in row-major order). argmax receives, per output,
  // the index of that element within its image (h * width + w) * channels
  // + c, for the backward pass.
  virtual absl::Status MaxPoolForward(const WindowGeometry& window,
                                      const float* x, float* y,
                                      int32_t* argmax) = 0;
  // dx (overwritten) = dy routed to the elements argmax names, summed where
  // windows overlap. argmax must come from MaxPoolForward over the same
  // geometry: the CPU device refuses entries outside the image, the CUDA
  // device (which gathers per dx element) ignores any that name an element
  // outside their window.
  virtual absl::Status MaxPoolBackward(const WindowGeometry& window,
                                       const float* dy, const int32_t* argmax,
                                       float* dx) = 0;

  // y = x with `padding` rows and columns of zeros around every image; y is
  // (height + top + bottom) x (width + left + right).
  virtual absl::Status ZeroPad2D(const NhwcShape& x_shape,
                                 const Padding2D& padding, const float* x,
                                 float* y) = 0;
  // dx = the interior of dy, the part that ZeroPad2D copied x to.
  virtual absl::Status ZeroPad2DBackward(const NhwcShape& x_shape,
                                         const Padding2D& padding,
                                         const float* dy, float* dx) = 0;

  // y[n][c] = mean over the `pixels` pixels of x[n][p][c].
  virtual absl::Status GlobalAvgPool(int batch, int pixels, int channels,
                                     const float* x, float* y) = 0;
  // dx[n][p][c] = dy[n][c] / pixels.
  virtual absl::Status GlobalAvgPoolBackward(int batch, int pixels,
                                             int channels, const float* dy,
                                             float* dx) = 0;

  // Batch normalization of x, `rows` x `channels` (an NHWC batch read as
  // N*H*W rows), training mode: each channel is normalized with the mean and
  // the biased variance (divided by rows) of this batch,
  //   y = gamma * (x - mean) / sqrt(var + epsilon) + beta,
  // mean and 1 / sqrt(var + epsilon) are saved for the backward pass, and the
  // moving statistics move towards the batch's as Keras does:
  //   moving = momentum * moving + (1 - momentum) * batch value.
  virtual absl::Status BatchNormTraining(int rows, int channels, const float* x,
                                         const float* gamma, const float* beta,
                                         float epsilon, float momentum,
                                         float* y, float* moving_mean,
                                         float* moving_variance,
                                         float* saved_mean,
                                         float* saved_inv_std) = 0;
  // Inference mode: y = gamma * (x - moving_mean) /
  // sqrt(moving_variance + epsilon) + beta.
  virtual absl::Status BatchNormInference(int rows, int channels,
                                          const float* x, const float* gamma,
                                          const float* beta,
                                          const float* moving_mean,
                                          const float* moving_variance,
                                          float epsilon, float* y) = 0;
  // Gradients of BatchNormTraining's output (batch statistics included) from
  // dy: dgamma and dbeta (channels values each) and, when dx is not null,
  // dx. x, saved_mean and saved_inv_std are those of the forward pass.
  virtual absl::Status BatchNormBackward(int rows, int channels, const float* x,
                                         const float* dy, const float* gamma,
                                         const float* saved_mean,
                                         const float* saved_inv_std, float* dx,
                                         float* dgamma, float* dbeta) = 0;

  // Waits until all queued work, copies included, is done.
  virtual absl::Status Synchronize() = 0;

  // The CopyToHostAsync copies in flight, without waiting for all the
  // device's work: MarkCopies() marks those queued so far, CopiesDone(mark)
  // says without waiting whether they have all landed on the host, and
  // WaitForCopies(mark) waits for them (not for later math). Marks count up
  // from 0 and hold until the next Synchronize(). The defaults synchronize
  // the whole device, which is right for a device whose copies are done
  // when they return (the CPU's).
  virtual absl::StatusOr<uint64_t> MarkCopies() { return uint64_t{0}; }
  virtual absl::StatusOr<bool> CopiesDone(uint64_t /*mark*/) {
    absl::Status synced = Synchronize();
    if (!synced.ok()) return synced;
    return true;
  }
  virtual absl::Status WaitForCopies(uint64_t /*mark*/) {
    return Synchronize();
  }
};

}  // namespace lockstep

#endif  // LOCKSTEP_WORKER_DEVICE_DEVICE_H_
