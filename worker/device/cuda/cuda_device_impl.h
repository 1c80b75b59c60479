// The CUDA device's class, shared by the files that implement it:
// cuda_device.cc (creation, memory, copies, Gemm and the MLP's kernels) and
// cuda_device_cnn.cc (the convolutional networks' ops). Internal to
// worker/device/cuda; everything else goes through cuda_device.h.
#ifndef LOCKSTEP_WORKER_DEVICE_CUDA_CUDA_DEVICE_IMPL_H_
#define LOCKSTEP_WORKER_DEVICE_CUDA_CUDA_DEVICE_IMPL_H_

#include <cuda_runtime_api.h>

#include <cstddef>
#include <cstdint>
#include <memory>
#include <string>
#include <utility>
#include <vector>

#include "absl/status/status.h"
#include "absl/status/statusor.h"
#include "common/base/status_macros.h"
#include "worker/device/cuda/cuda_check.h"
#include "worker/device/cuda/cuda_resources.h"
#include "worker/device/device.h"

namespace lockstep {
namespace cuda_internal {

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
  absl::Status ReluForwardInto(size_t n, const float* x, float* y) override;
  absl::Status ReluBackward(size_t n, const float* activation,
                            float* grad) override;
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
  absl::StatusOr<uint64_t> MarkCopies() override;
  absl::StatusOr<bool> CopiesDone(uint64_t mark) override;
  absl::Status WaitForCopies(uint64_t mark) override;

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
  // The image ops' common path (cuda_device_cnn.cc): `work` is the count
  // a device_checks.h check returned; unless it is an error or 0, makes the
  // GPU current and enqueues `launch` (a cuda_internal launcher called with
  // compute_), whose error names `launcher`.
  template <typename Launch>
  absl::Status Enqueue(const char* launcher,
                       const absl::StatusOr<int64_t>& work, Launch launch) {
    if (!work.ok()) return work.status();
    if (*work == 0) return absl::OkStatus();
    RETURN_IF_ERROR(Activate());
    return cuda_internal::ToStatus(launch(compute_.get()), launcher, __FILE__,
                                   __LINE__);
  }

  const int gpu_;
  const std::string name_;
  // Math and host-to-device copies run on compute_; CopyToHostAsync's
  // copies on copy_, after an event recorded on compute_.
  Stream compute_;
  Stream copy_;
  Event copy_ready_;
  // MarkCopies' events, recorded on copy_; the first marks_used_ are marks
  // handed out since the last Synchronize (the rest are reused).
  std::vector<Event> copy_marks_;
  size_t marks_used_ = 0;
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

}  // namespace cuda_internal
}  // namespace lockstep

#endif  // LOCKSTEP_WORKER_DEVICE_CUDA_CUDA_DEVICE_IMPL_H_
