// The CPU implementation of Device: host memory, OpenBLAS for Gemm, AVX-512
// kernels for convolution where the processor has them (cpu_conv.h), plain
// loops for the element-wise ops (the image and batch-norm ones live in
// cpu_image_ops.h and cpu_batch_norm_ops.h).
#ifndef LOCKSTEP_WORKER_DEVICE_CPU_CPU_DEVICE_H_
#define LOCKSTEP_WORKER_DEVICE_CPU_CPU_DEVICE_H_

#include <cstddef>
#include <cstdint>
#include <memory>
#include <string>

#include "absl/status/status.h"
#include "absl/status/statusor.h"
#include "worker/device/cpu/cpu_conv_runner.h"
#include "worker/device/device.h"

namespace lockstep {

// How a CpuDevice convolves (DeviceOptions::cpu_conv, --cpu_conv).
enum class CpuConv {
  // The direct kernels of cpu_conv.h where they win (see HasDirectConv), on
  // a processor with AVX-512F; im2col + OpenBLAS otherwise.
  kAuto,
  // The direct kernels for every convolution that needs unfolding (not a
  // 1x1 stride-1 one, which is one Gemm either way), where the processor
  // has AVX-512F; for measuring them where auto would not.
  kDirect,
  // im2col + OpenBLAS always.
  kIm2Col,
};

// A Device whose buffers are 64-byte aligned host memory (AllocateHost's
// too). Every call runs synchronously on the calling thread (plus OpenBLAS's
// own threads inside Gemm, and the direct convolutions' inside theirs), so
// CopyToHostAsync copies at once and
// Synchronize() has nothing to wait for. OpenBLAS keeps its thread
// count in process-wide state: the last CpuDevice created decides it for all.
// Externally synchronized, like every Device.
class CpuDevice final : public Device {
 public:
  // `num_threads` is OpenBLAS's thread count and the direct convolutions'
  // (cpu_conv_runner.h); values below 1 mean 1. Without AVX-512F, `conv`
  // kAuto and kDirect mean kIm2Col.
  static std::unique_ptr<Device> Create(int num_threads,
                                        CpuConv conv = CpuConv::kAuto);

  // The im2col workspace bound (Conv2DOptions::workspace_limit_floats) that
  // suits this device: 2 MiB, the size of a core's L2 cache give or take a
  // factor of 2. Gemm reads Im2Col's columns straight back (and Col2Im
  // reads Gemm's), so a workspace that stays in cache saves trips to memory;
  // a ResNet-20 step at batch 32 takes 25-35% less time than with the whole
  // batch's columns (19 MiB in its first stage). Measured flat from 1 to 5
  // MiB with OpenBLAS's AVX2 and AVX-512 kernels (1 MiB L2, 32 MiB L3).
  static constexpr int64_t kConvWorkspaceFloats = int64_t{1} << 19;

  CpuDevice(const CpuDevice&) = delete;
  CpuDevice& operator=(const CpuDevice&) = delete;

  std::string Name() const override;
  bool BuffersAreHostMemory() const override { return true; }
  absl::StatusOr<std::unique_ptr<DeviceBuffer>> Allocate(size_t bytes) override;
  absl::StatusOr<std::unique_ptr<DeviceBuffer>> AllocateHost(
      size_t bytes) override;
  absl::Status CopyToDevice(const void* src, void* dst, size_t bytes) override;
  absl::Status CopyToHost(const void* src, void* dst, size_t bytes) override;
  absl::Status CopyToHostAsync(const void* src, void* dst,
                               size_t bytes) override;
  absl::Status Gemm(bool trans_a, bool trans_b, int m, int n, int k,
                    float alpha, const float* a, const float* b, float beta,
                    float* c) override;
  absl::Status AddBias(int rows, int cols, const float* bias,
                       float* x) override;
  absl::Status ReluForward(size_t n, float* x) override;
  absl::Status ReluBackward(size_t n, const float* activation,
                            float* grad) override;
  absl::Status ReluForwardInto(size_t n, const float* x, float* y) override;
  absl::Status ReluBackwardInto(size_t n, const float* activation,
                                const float* dy, float* dx) override;
  absl::Status BiasGradient(int rows, int cols, const float* grad,
                            float* bias_grad) override;
  absl::Status SoftmaxCrossEntropy(int rows, int cols, const float* logits,
                                   const int32_t* labels, float grad_scale,
                                   float* grad_logits, double* loss_sum,
                                   int64_t* correct) override;
  absl::Status Axpy(size_t n, float alpha, const float* x, float* y) override;
  absl::Status CopyOnDevice(const void* src, void* dst, size_t bytes) override;
  bool HasDirectConv(const WindowGeometry& window, int filters) const override;
  absl::Status ConvForward(const WindowGeometry& window, int filters,
                           const float* x, const float* kernel,
                           float* y) override;
  absl::Status ConvBackwardData(const WindowGeometry& window, int filters,
                                const float* dy, const float* kernel,
                                float* dx) override;
  absl::Status ConvBackwardFilter(const WindowGeometry& window, int filters,
                                  const float* x, const float* dy,
                                  float* kernel_grad) override;
  absl::Status Im2Col(const WindowGeometry& window, const float* image,
                      float* columns) override;
  absl::Status Col2Im(const WindowGeometry& window, const float* columns,
                      float* image) override;
  absl::Status MaxPoolForward(const WindowGeometry& window, const float* x,
                              float* y, int32_t* argmax) override;
  absl::Status MaxPoolBackward(const WindowGeometry& window, const float* dy,
                               const int32_t* argmax, float* dx) override;
  absl::Status ZeroPad2D(const NhwcShape& x_shape, const Padding2D& padding,
                         const float* x, float* y) override;
  absl::Status ZeroPad2DBackward(const NhwcShape& x_shape,
                                 const Padding2D& padding, const float* dy,
                                 float* dx) override;
  absl::Status GlobalAvgPool(int batch, int pixels, int channels,
                             const float* x, float* y) override;
  absl::Status GlobalAvgPoolBackward(int batch, int pixels, int channels,
                                     const float* dy, float* dx) override;
  absl::Status BatchNormTraining(int rows, int channels, const float* x,
                                 const float* gamma, const float* beta,
                                 float epsilon, float momentum, float* y,
                                 float* moving_mean, float* moving_variance,
                                 float* saved_mean,
                                 float* saved_inv_std) override;
  absl::Status BatchNormInference(int rows, int channels, const float* x,
                                  const float* gamma, const float* beta,
                                  const float* moving_mean,
                                  const float* moving_variance, float epsilon,
                                  float* y) override;
  absl::Status BatchNormBackward(int rows, int channels, const float* x,
                                 const float* dy, const float* gamma,
                                 const float* saved_mean,
                                 const float* saved_inv_std, float* dx,
                                 float* dgamma, float* dbeta) override;
  absl::Status Synchronize() override;

 private:
  CpuDevice(int num_threads, CpuConv conv);

  const int num_threads_;
  const CpuConv conv_;  // Create's choice, as the processor allows
  std::unique_ptr<DirectConvRunner> conv_runner_;  // Unless kIm2Col.
};

}  // namespace lockstep

#endif  // LOCKSTEP_WORKER_DEVICE_CPU_CPU_DEVICE_H_
