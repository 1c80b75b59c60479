#include "worker/cuda/cuda_device.h"

#include <cublas_v2.h>
#include <cuda_runtime_api.h>

#include <algorithm>
#include <cstdint>
#include <cstring>
#include <string>
#include <utility>

#include "absl/strings/str_cat.h"
#include "absl/strings/str_format.h"
#include "common/status_macros.h"
#include "worker/cuda/cuda_check.h"
#include "worker/cuda/cuda_resources.h"
#include "worker/cuda/image_kernels.h"
#include "worker/cuda/kernels.h"
#include "worker/device_checks.h"

namespace lockstep {
namespace {

using cuda_internal::CublasHandle;
using cuda_internal::DeviceMemory;
using cuda_internal::Event;
using cuda_internal::PinnedMemory;
using cuda_internal::SoftmaxResult;
using cuda_internal::Stream;

// A DeviceBuffer over GPU memory (Allocate) or pinned host memory
// (AllocateHost); `Memory` frees it.
template <typename Memory>
class CudaBuffer final : public DeviceBuffer {
 public:
  CudaBuffer(Memory memory, size_t bytes)
      : memory_(std::move(memory)), bytes_(bytes) {}

  void* data() override { return memory_.get(); }
  const void* data() const override { return memory_.get(); }
  size_t bytes() const override { return bytes_; }

 private:
  Memory memory_;
  const size_t bytes_;
};

absl::StatusOr<int> VisibleGpus() {
  int count = 0;
  CUDA_RETURN_IF_ERROR(cudaGetDeviceCount(&count));
  return count;
}

absl::Status CheckShape(const char* op, int rows, int cols) {
  if (rows < 0 || cols < 0) {
    return absl::InvalidArgumentError(
        absl::StrFormat("%s: negative shape %d x %d", op, rows, cols));
  }
  return absl::OkStatus();
}

class CudaDevice final : public Device {
 public:
  static absl::StatusOr<std::unique_ptr<Device>> Create(int gpu, bool tf32);

  ~CudaDevice() override {
    // Queued work may still use the scratch buffers freed below.
    if (Activate().ok()) {
      cudaStreamSynchronize(compute_.get());
      cudaStreamSynchronize(copy_.get());
    }
  }
  CudaDevice(const CudaDevice&) = delete;
  CudaDevice& operator=(const CudaDevice&) = delete;

  std::string Name() const override { return name_; }
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
  absl::Status BiasGradient(int rows, int cols, const float* grad,
                            float* bias_grad) override;
  absl::Status SoftmaxCrossEntropy(int rows, int cols, const float* logits,
                                   const int32_t* labels, float grad_scale,
                                   float* grad_logits, double* loss_sum,
                                   int64_t* correct) override;
  absl::Status Axpy(size_t n, float alpha, const float* x, float* y) override;
  absl::Status CopyOnDevice(const void* src, void* dst, size_t bytes) override;
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
  CudaDevice(int gpu, std::string name) : gpu_(gpu), name_(std::move(name)) {}

  // Makes this GPU current on the calling thread: a worker may hand its
  // device from thread to thread, and the runtime's current GPU is per
  // thread.
  absl::Status Activate() const;
  // Grows the per-row scratch of SoftmaxCrossEntropy to `rows` rows.
  absl::Status ReserveRows(int rows);
  // Grows the batch-norm kernels' scratch to `bytes`.
  absl::Status ReserveScratch(size_t bytes);

  const int gpu_;
  const std::string name_;
  // Math and host-to-device copies run on compute_; CopyToHostAsync's
  // copies on copy_, after an event recorded on compute_.
  Stream compute_;
  Stream copy_;
  Event copy_ready_;
  CublasHandle cublas_;       // Bound to compute_.
  DeviceMemory result_;       // One SoftmaxResult.
  PinnedMemory host_result_;  // Where it is read back.
  // double row_loss[row_capacity_], then int row_hit[row_capacity_].
  DeviceMemory rows_;
  int row_capacity_ = 0;
  // The batch-norm kernels' partial sums and per-channel numbers; used by
  // one call at a time (the calls queue on compute_).
  DeviceMemory scratch_;
  size_t scratch_bytes_ = 0;
};

absl::StatusOr<std::unique_ptr<Device>> CudaDevice::Create(int gpu, bool tf32) {
  absl::StatusOr<int> gpus = VisibleGpus();
  if (!gpus.ok()) {
    return absl::FailedPreconditionError(absl::StrCat(
        "no CUDA GPU is visible to this process: ", gpus.status().message()));
  }
  if (*gpus == 0) {
    return absl::FailedPreconditionError(
        "no CUDA GPU is visible to this process (cudaGetDeviceCount found "
        "none)");
  }
  if (gpu < 0 || gpu >= *gpus) {
    return absl::InvalidArgumentError(absl::StrFormat(
        "CUDA GPU %d does not exist: %d visible (ordinals 0 to %d)", gpu, *gpus,
        *gpus - 1));
  }
  CUDA_RETURN_IF_ERROR(cudaSetDevice(gpu));
  cudaDeviceProp properties;
  CUDA_RETURN_IF_ERROR(cudaGetDeviceProperties(&properties, gpu));
  const std::string name = absl::StrFormat(
      "cuda:%d (%s, cuBLAS %s)", gpu, properties.name, tf32 ? "TF32" : "fp32");
  std::unique_ptr<CudaDevice> device(new CudaDevice(gpu, name));
  ASSIGN_OR_RETURN(device->compute_, cuda_internal::MakeStream());
  ASSIGN_OR_RETURN(device->copy_, cuda_internal::MakeStream());
  ASSIGN_OR_RETURN(device->copy_ready_, cuda_internal::MakeEvent());
  ASSIGN_OR_RETURN(device->cublas_, cuda_internal::MakeCublasHandle());
  CUDA_RETURN_IF_ERROR(
      cublasSetStream(device->cublas_.get(), device->compute_.get()));
  // The default math mode never trades precision away, so sgemm stays true
  // fp32; TF32 tensor cores only when asked for.
  CUDA_RETURN_IF_ERROR(
      cublasSetMathMode(device->cublas_.get(), tf32 ? CUBLAS_TF32_TENSOR_OP_MATH
                                                    : CUBLAS_DEFAULT_MATH));
  ASSIGN_OR_RETURN(device->result_,
                   cuda_internal::MakeDeviceMemory(sizeof(SoftmaxResult)));
  ASSIGN_OR_RETURN(device->host_result_,
                   cuda_internal::MakePinnedMemory(sizeof(SoftmaxResult)));
  return std::unique_ptr<Device>(std::move(device));
}

absl::Status CudaDevice::Activate() const {
  CUDA_RETURN_IF_ERROR(cudaSetDevice(gpu_));
  return absl::OkStatus();
}

absl::StatusOr<std::unique_ptr<DeviceBuffer>> CudaDevice::Allocate(
    size_t bytes) {
  RETURN_IF_ERROR(Activate());
  ASSIGN_OR_RETURN(DeviceMemory memory, cuda_internal::MakeDeviceMemory(bytes));
  // On compute_, so every later use of the buffer is ordered after it.
  CUDA_RETURN_IF_ERROR(cudaMemsetAsync(
      memory.get(), 0, std::max<size_t>(bytes, 1), compute_.get()));
  return std::unique_ptr<DeviceBuffer>(
      new CudaBuffer<DeviceMemory>(std::move(memory), bytes));
}

absl::StatusOr<std::unique_ptr<DeviceBuffer>> CudaDevice::AllocateHost(
    size_t bytes) {
  RETURN_IF_ERROR(Activate());
  ASSIGN_OR_RETURN(PinnedMemory memory, cuda_internal::MakePinnedMemory(bytes));
  std::memset(memory.get(), 0, std::max<size_t>(bytes, 1));
  return std::unique_ptr<DeviceBuffer>(
      new CudaBuffer<PinnedMemory>(std::move(memory), bytes));
}

absl::Status CudaDevice::CopyToDevice(const void* src, void* dst,
                                      size_t bytes) {
  if (bytes == 0) return absl::OkStatus();
  if (src == nullptr || dst == nullptr) {
    return absl::InvalidArgumentError("CopyToDevice: null pointer");
  }
  RETURN_IF_ERROR(Activate());
  CUDA_RETURN_IF_ERROR(
      cudaMemcpyAsync(dst, src, bytes, cudaMemcpyHostToDevice, compute_.get()));
  // The caller may reuse `src` on return.
  CUDA_RETURN_IF_ERROR(cudaStreamSynchronize(compute_.get()));
  return absl::OkStatus();
}

absl::Status CudaDevice::CopyToHost(const void* src, void* dst, size_t bytes) {
  if (bytes == 0) return absl::OkStatus();
  if (src == nullptr || dst == nullptr) {
    return absl::InvalidArgumentError("CopyToHost: null pointer");
  }
  RETURN_IF_ERROR(Activate());
  CUDA_RETURN_IF_ERROR(
      cudaMemcpyAsync(dst, src, bytes, cudaMemcpyDeviceToHost, compute_.get()));
  CUDA_RETURN_IF_ERROR(cudaStreamSynchronize(compute_.get()));
  return absl::OkStatus();
}

absl::Status CudaDevice::CopyToHostAsync(const void* src, void* dst,
                                         size_t bytes) {
  if (bytes == 0) return absl::OkStatus();
  if (src == nullptr || dst == nullptr) {
    return absl::InvalidArgumentError("CopyToHostAsync: null pointer");
  }
  RETURN_IF_ERROR(Activate());
  // The copy waits for the math queued so far, and only for that: compute_
  // goes on with the next calls while copy_ moves the bytes.
  CUDA_RETURN_IF_ERROR(cudaEventRecord(copy_ready_.get(), compute_.get()));
  CUDA_RETURN_IF_ERROR(cudaStreamWaitEvent(copy_.get(), copy_ready_.get(), 0));
  CUDA_RETURN_IF_ERROR(
      cudaMemcpyAsync(dst, src, bytes, cudaMemcpyDeviceToHost, copy_.get()));
  return absl::OkStatus();
}

absl::Status CudaDevice::Gemm(bool trans_a, bool trans_b, int m, int n, int k,
                              float alpha, const float* a, const float* b,
                              float beta, float* c) {
  if (m < 0 || n < 0 || k < 0) {
    return absl::InvalidArgumentError(
        absl::StrFormat("Gemm: negative size m=%d n=%d k=%d", m, n, k));
  }
  if (m == 0 || n == 0) return absl::OkStatus();
  if ((k > 0 && (a == nullptr || b == nullptr)) || c == nullptr) {
    return absl::InvalidArgumentError("Gemm: null pointer");
  }
  RETURN_IF_ERROR(Activate());
  const int lda = std::max(trans_a ? m : k, 1);
  const int ldb = std::max(trans_b ? k : n, 1);
  // cuBLAS is column-major, and a row-major matrix read column-major is its
  // transpose: c^T = op(b)^T . op(a)^T, so b goes first and nothing moves.
  CUDA_RETURN_IF_ERROR(cublasSgemm(cublas_.get(),
                                   trans_b ? CUBLAS_OP_T : CUBLAS_OP_N,
                                   trans_a ? CUBLAS_OP_T : CUBLAS_OP_N, n, m, k,
                                   &alpha, b, ldb, a, lda, &beta, c, n));
  return absl::OkStatus();
}

absl::Status CudaDevice::AddBias(int rows, int cols, const float* bias,
                                 float* x) {
  RETURN_IF_ERROR(CheckShape("AddBias", rows, cols));
  if (rows == 0 || cols == 0) return absl::OkStatus();
  if (bias == nullptr || x == nullptr) {
    return absl::InvalidArgumentError("AddBias: null pointer");
  }
  RETURN_IF_ERROR(Activate());
  CUDA_RETURN_IF_ERROR(
      cuda_internal::LaunchAddBias(rows, cols, bias, x, compute_.get()));
  return absl::OkStatus();
}

absl::Status CudaDevice::ReluForward(size_t n, float* x) {
  if (n == 0) return absl::OkStatus();
  if (x == nullptr) {
    return absl::InvalidArgumentError("ReluForward: x is null");
  }
  RETURN_IF_ERROR(Activate());
  CUDA_RETURN_IF_ERROR(cuda_internal::LaunchReluForward(n, x, compute_.get()));
  return absl::OkStatus();
}

absl::Status CudaDevice::ReluBackward(size_t n, const float* activation,
                                      float* grad) {
  if (n == 0) return absl::OkStatus();
  if (activation == nullptr || grad == nullptr) {
    return absl::InvalidArgumentError("ReluBackward: null pointer");
  }
  RETURN_IF_ERROR(Activate());
  CUDA_RETURN_IF_ERROR(
      cuda_internal::LaunchReluBackward(n, activation, grad, compute_.get()));
  return absl::OkStatus();
}

absl::Status CudaDevice::BiasGradient(int rows, int cols, const float* grad,
                                      float* bias_grad) {
  RETURN_IF_ERROR(CheckShape("BiasGradient", rows, cols));
  if (cols == 0) return absl::OkStatus();
  if (bias_grad == nullptr || (grad == nullptr && rows > 0)) {
    return absl::InvalidArgumentError("BiasGradient: null pointer");
  }
  RETURN_IF_ERROR(Activate());
  // Zero rows sum to zero, which the kernel writes as well.
  CUDA_RETURN_IF_ERROR(cuda_internal::LaunchBiasGradient(
      rows, cols, grad, bias_grad, compute_.get()));
  return absl::OkStatus();
}

absl::Status CudaDevice::ReserveRows(int rows) {
  if (rows <= row_capacity_) return absl::OkStatus();
  // cudaFree of the old scratch waits for the kernels that use it.
  rows_.reset();
  row_capacity_ = 0;
  const size_t per_row = sizeof(double) + sizeof(int);
  ASSIGN_OR_RETURN(rows_, cuda_internal::MakeDeviceMemory(per_row * rows));
  row_capacity_ = rows;
  return absl::OkStatus();
}

absl::Status CudaDevice::SoftmaxCrossEntropy(
    int rows, int cols, const float* logits, const int32_t* labels,
    float grad_scale, float* grad_logits, double* loss_sum, int64_t* correct) {
  RETURN_IF_ERROR(CheckSoftmaxCrossEntropyArgs(rows, cols, logits, labels,
                                               loss_sum, correct));
  if (rows == 0) return absl::OkStatus();
  RETURN_IF_ERROR(Activate());
  RETURN_IF_ERROR(ReserveRows(rows));
  auto* row_loss = static_cast<double*>(rows_.get());
  auto* row_hit = reinterpret_cast<int*>(row_loss + row_capacity_);
  auto* result = static_cast<SoftmaxResult*>(result_.get());
  CUDA_RETURN_IF_ERROR(cuda_internal::LaunchSoftmaxCrossEntropy(
      rows, cols, logits, labels, grad_scale, grad_logits, row_loss, row_hit,
      result, compute_.get()));
  CUDA_RETURN_IF_ERROR(cudaMemcpyAsync(host_result_.get(), result,
                                       sizeof(SoftmaxResult),
                                       cudaMemcpyDeviceToHost, compute_.get()));
  CUDA_RETURN_IF_ERROR(cudaStreamSynchronize(compute_.get()));
  const auto& got = *static_cast<const SoftmaxResult*>(host_result_.get());
  if (got.bad_row >= 0) {
    return absl::InvalidArgumentError(absl::StrFormat(
        "SoftmaxCrossEntropy: label %d of row %d is outside [0, %d)",
        got.bad_label, got.bad_row, cols));
  }
  *loss_sum += got.loss_sum;
  *correct += got.correct;
  return absl::OkStatus();
}

absl::Status CudaDevice::Synchronize() {
  RETURN_IF_ERROR(Activate());
  CUDA_RETURN_IF_ERROR(cudaStreamSynchronize(compute_.get()));
  CUDA_RETURN_IF_ERROR(cudaStreamSynchronize(copy_.get()));
  return absl::OkStatus();
}

absl::Status CudaDevice::Axpy(size_t n, float alpha, const float* x, float* y) {
  RETURN_IF_ERROR(CheckAxpyArgs(n, x, y));
  if (n == 0) return absl::OkStatus();
  RETURN_IF_ERROR(Activate());
  CUDA_RETURN_IF_ERROR(
      cuda_internal::LaunchAxpy(n, alpha, x, y, compute_.get()));
  return absl::OkStatus();
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
  ASSIGN_OR_RETURN(const int64_t total,
                   CheckIm2ColArgs(window, image, columns));
  if (total == 0) return absl::OkStatus();
  RETURN_IF_ERROR(Activate());
  CUDA_RETURN_IF_ERROR(cuda_internal::LaunchIm2Col(ToElements(window), image,
                                                   columns, compute_.get()));
  return absl::OkStatus();
}

absl::Status CudaDevice::Col2Im(const WindowGeometry& window,
                                const float* columns, float* image) {
  ASSIGN_OR_RETURN(const int64_t total,
                   CheckCol2ImArgs(window, columns, image));
  if (total == 0) return absl::OkStatus();
  RETURN_IF_ERROR(Activate());
  CUDA_RETURN_IF_ERROR(cuda_internal::LaunchCol2Im(ToElements(window), columns,
                                                   image, compute_.get()));
  return absl::OkStatus();
}

absl::Status CudaDevice::MaxPoolForward(const WindowGeometry& window,
                                        const float* x, float* y,
                                        int32_t* argmax) {
  ASSIGN_OR_RETURN(const int64_t total,
                   CheckMaxPoolForwardArgs(window, x, y, argmax));
  if (total == 0) return absl::OkStatus();
  RETURN_IF_ERROR(Activate());
  CUDA_RETURN_IF_ERROR(cuda_internal::LaunchMaxPoolForward(
      ToElements(window), x, y, argmax, compute_.get()));
  return absl::OkStatus();
}

absl::Status CudaDevice::MaxPoolBackward(const WindowGeometry& window,
                                         const float* dy, const int32_t* argmax,
                                         float* dx) {
  ASSIGN_OR_RETURN(const int64_t total,
                   CheckMaxPoolBackwardArgs(window, dy, argmax, dx));
  if (total == 0) return absl::OkStatus();
  RETURN_IF_ERROR(Activate());
  // A gather: each dx element sums the outputs whose argmax names it, so an
  // argmax that names nothing in its window is ignored rather than written
  // through (the CPU device, which scatters, refuses out-of-image ones).
  CUDA_RETURN_IF_ERROR(cuda_internal::LaunchMaxPoolBackward(
      ToElements(window), dy, argmax, dx, compute_.get()));
  return absl::OkStatus();
}

absl::Status CudaDevice::ZeroPad2D(const NhwcShape& x_shape,
                                   const Padding2D& padding, const float* x,
                                   float* y) {
  ASSIGN_OR_RETURN(const int64_t total,
                   CheckZeroPad2DArgs(x_shape, padding, x, y));
  if (total == 0) return absl::OkStatus();
  RETURN_IF_ERROR(Activate());
  CUDA_RETURN_IF_ERROR(cuda_internal::LaunchZeroPad2D(
      ToElements(x_shape, padding), x, y, compute_.get()));
  return absl::OkStatus();
}

absl::Status CudaDevice::ZeroPad2DBackward(const NhwcShape& x_shape,
                                           const Padding2D& padding,
                                           const float* dy, float* dx) {
  ASSIGN_OR_RETURN(const int64_t total,
                   CheckZeroPad2DBackwardArgs(x_shape, padding, dy, dx));
  if (total == 0) return absl::OkStatus();
  RETURN_IF_ERROR(Activate());
  CUDA_RETURN_IF_ERROR(cuda_internal::LaunchZeroPad2DBackward(
      ToElements(x_shape, padding), dy, dx, compute_.get()));
  return absl::OkStatus();
}

absl::Status CudaDevice::GlobalAvgPool(int batch, int pixels, int channels,
                                       const float* x, float* y) {
  ASSIGN_OR_RETURN(const int64_t total,
                   CheckGlobalAvgPoolArgs("GlobalAvgPool", batch, pixels,
                                          channels, x, y, /*backward=*/false));
  if (total == 0) return absl::OkStatus();
  RETURN_IF_ERROR(Activate());
  CUDA_RETURN_IF_ERROR(cuda_internal::LaunchGlobalAvgPool(
      batch, pixels, channels, x, y, compute_.get()));
  return absl::OkStatus();
}

absl::Status CudaDevice::GlobalAvgPoolBackward(int batch, int pixels,
                                               int channels, const float* dy,
                                               float* dx) {
  ASSIGN_OR_RETURN(
      const int64_t total,
      CheckGlobalAvgPoolArgs("GlobalAvgPoolBackward", batch, pixels, channels,
                             dy, dx, /*backward=*/true));
  if (total == 0) return absl::OkStatus();
  RETURN_IF_ERROR(Activate());
  CUDA_RETURN_IF_ERROR(cuda_internal::LaunchGlobalAvgPoolBackward(
      batch, pixels, channels, dy, dx, compute_.get()));
  return absl::OkStatus();
}

absl::Status CudaDevice::ReserveScratch(size_t bytes) {
  if (bytes <= scratch_bytes_) return absl::OkStatus();
  // The kernels queued so far may still use the old scratch.
  CUDA_RETURN_IF_ERROR(cudaStreamSynchronize(compute_.get()));
  scratch_.reset();
  scratch_bytes_ = 0;
  ASSIGN_OR_RETURN(scratch_, cuda_internal::MakeDeviceMemory(bytes));
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
  RETURN_IF_ERROR(
      ReserveScratch(cuda_internal::BatchNormScratchBytes(rows, channels)));
  CUDA_RETURN_IF_ERROR(cuda_internal::LaunchBatchNormTraining(
      rows, channels, x, gamma, beta, epsilon, momentum, y, moving_mean,
      moving_variance, saved_mean, saved_inv_std, scratch_.get(),
      compute_.get()));
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
  RETURN_IF_ERROR(
      ReserveScratch(cuda_internal::BatchNormScratchBytes(rows, channels)));
  CUDA_RETURN_IF_ERROR(cuda_internal::LaunchBatchNormInference(
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
  RETURN_IF_ERROR(
      ReserveScratch(cuda_internal::BatchNormScratchBytes(rows, channels)));
  CUDA_RETURN_IF_ERROR(cuda_internal::LaunchBatchNormBackward(
      rows, channels, x, dy, gamma, saved_mean, saved_inv_std, dx, dgamma,
      dbeta, scratch_.get(), compute_.get()));
  return absl::OkStatus();
}

}  // namespace

int CudaDeviceCount() {
  absl::StatusOr<int> gpus = VisibleGpus();
  return gpus.ok() ? *gpus : 0;
}

absl::StatusOr<std::unique_ptr<Device>> CreateCudaDevice(int gpu, bool tf32) {
  return CudaDevice::Create(gpu, tf32);
}

}  // namespace lockstep
