#include "worker/device/cuda/cuda_device.h"

#include <cublas_v2.h>
#include <cuda_runtime_api.h>

#include <algorithm>
#include <cstdint>
#include <cstring>
#include <string>
#include <utility>

#include "absl/strings/str_cat.h"
#include "absl/strings/str_format.h"
#include "common/base/status_macros.h"
#include "worker/device/cuda/batch_norm_kernels.h"
#include "worker/device/cuda/cuda_check.h"
#include "worker/device/cuda/cuda_device_impl.h"
#include "worker/device/cuda/cuda_resources.h"
#include "worker/device/cuda/kernels.h"
#include "worker/device/device_checks.h"

namespace lockstep {
namespace {

using cuda_internal::DeviceMemory;
using cuda_internal::PinnedMemory;

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

}  // namespace

namespace cuda_internal {

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
  ASSIGN_OR_RETURN(const int64_t work,
                   CheckCopyArgs("CopyToDevice", bytes, src, dst));
  if (work == 0) return absl::OkStatus();
  RETURN_IF_ERROR(Activate());
  CUDA_RETURN_IF_ERROR(
      cudaMemcpyAsync(dst, src, bytes, cudaMemcpyHostToDevice, compute_.get()));
  // The caller may reuse `src` on return.
  CUDA_RETURN_IF_ERROR(cudaStreamSynchronize(compute_.get()));
  return absl::OkStatus();
}

absl::Status CudaDevice::CopyToHost(const void* src, void* dst, size_t bytes) {
  ASSIGN_OR_RETURN(const int64_t work,
                   CheckCopyArgs("CopyToHost", bytes, src, dst));
  if (work == 0) return absl::OkStatus();
  RETURN_IF_ERROR(Activate());
  CUDA_RETURN_IF_ERROR(
      cudaMemcpyAsync(dst, src, bytes, cudaMemcpyDeviceToHost, compute_.get()));
  CUDA_RETURN_IF_ERROR(cudaStreamSynchronize(compute_.get()));
  return absl::OkStatus();
}

absl::Status CudaDevice::CopyToHostAsync(const void* src, void* dst,
                                         size_t bytes) {
  ASSIGN_OR_RETURN(const int64_t work,
                   CheckCopyArgs("CopyToHostAsync", bytes, src, dst));
  if (work == 0) return absl::OkStatus();
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
  ASSIGN_OR_RETURN(const int64_t outputs, CheckGemmArgs(m, n, k, a, b, c));
  if (outputs == 0) return absl::OkStatus();
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
  ASSIGN_OR_RETURN(const int64_t n, CheckAddBiasArgs(rows, cols, bias, x));
  if (n == 0) return absl::OkStatus();
  RETURN_IF_ERROR(Activate());
  CUDA_RETURN_IF_ERROR(
      cuda_internal::LaunchAddBias(rows, cols, bias, x, compute_.get()));
  return absl::OkStatus();
}

absl::Status CudaDevice::ReluForward(size_t n, float* x) {
  return ReluForwardInto(n, x, x);
}

absl::Status CudaDevice::ReluForwardInto(size_t n, const float* x, float* y) {
  ASSIGN_OR_RETURN(const int64_t work, CheckReluForwardArgs(n, x, y));
  if (work == 0) return absl::OkStatus();
  RETURN_IF_ERROR(Activate());
  CUDA_RETURN_IF_ERROR(
      cuda_internal::LaunchReluForward(n, x, y, compute_.get()));
  return absl::OkStatus();
}

absl::Status CudaDevice::ReluBackward(size_t n, const float* activation,
                                      float* grad) {
  return ReluBackwardInto(n, activation, grad, grad);
}

absl::Status CudaDevice::ReluBackwardInto(size_t n, const float* activation,
                                          const float* dy, float* dx) {
  ASSIGN_OR_RETURN(const int64_t work,
                   CheckReluBackwardArgs(n, activation, dy, dx));
  if (work == 0) return absl::OkStatus();
  RETURN_IF_ERROR(Activate());
  CUDA_RETURN_IF_ERROR(cuda_internal::LaunchReluBackward(n, activation, dy, dx,
                                                         compute_.get()));
  return absl::OkStatus();
}

absl::Status CudaDevice::BiasGradient(int rows, int cols, const float* grad,
                                      float* bias_grad) {
  ASSIGN_OR_RETURN(const int64_t outputs,
                   CheckBiasGradientArgs(rows, cols, grad, bias_grad));
  if (outputs == 0) return absl::OkStatus();
  RETURN_IF_ERROR(Activate());
  RETURN_IF_ERROR(
      ReserveScratch(cuda_internal::BiasGradientScratchBytes(rows, cols)));
  // Zero rows sum to zero, which the launcher writes as well.
  CUDA_RETURN_IF_ERROR(cuda_internal::LaunchBiasGradient(
      rows, cols, grad, bias_grad, scratch_.get(), compute_.get()));
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
  marks_used_ = 0;
  return absl::OkStatus();
}

absl::StatusOr<uint64_t> CudaDevice::MarkCopies() {
  RETURN_IF_ERROR(Activate());
  if (marks_used_ == copy_marks_.size()) {
    ASSIGN_OR_RETURN(Event event, MakeEvent());
    copy_marks_.push_back(std::move(event));
  }
  CUDA_RETURN_IF_ERROR(
      cudaEventRecord(copy_marks_[marks_used_].get(), copy_.get()));
  return uint64_t{marks_used_++};
}

absl::StatusOr<bool> CudaDevice::CopiesDone(uint64_t mark) {
  if (mark >= marks_used_) {
    return absl::InvalidArgumentError(absl::StrFormat(
        "CopiesDone: mark %d was not handed out since the last Synchronize",
        mark));
  }
  RETURN_IF_ERROR(Activate());
  const cudaError_t e = cudaEventQuery(copy_marks_[mark].get());
  if (e == cudaErrorNotReady) {
    // Not an error, but cleared so that the next launch's check cannot
    // mistake it for one of its own.
    cudaGetLastError();
    return false;
  }
  RETURN_IF_ERROR(ToStatus(e, "cudaEventQuery(copy_marks_[mark].get())",
                           __FILE__, __LINE__));
  return true;
}

absl::Status CudaDevice::WaitForCopies(uint64_t mark) {
  if (mark >= marks_used_) {
    return absl::InvalidArgumentError(absl::StrFormat(
        "WaitForCopies: mark %d was not handed out since the last "
        "Synchronize",
        mark));
  }
  RETURN_IF_ERROR(Activate());
  CUDA_RETURN_IF_ERROR(cudaEventSynchronize(copy_marks_[mark].get()));
  return absl::OkStatus();
}

}  // namespace cuda_internal

int CudaDeviceCount() {
  absl::StatusOr<int> gpus = VisibleGpus();
  return gpus.ok() ? *gpus : 0;
}

absl::StatusOr<std::unique_ptr<Device>> CreateCudaDevice(int gpu, bool tf32) {
  return cuda_internal::CudaDevice::Create(gpu, tf32);
}

}  // namespace lockstep
