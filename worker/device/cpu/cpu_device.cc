#include "worker/device/cpu/cpu_device.h"

#include "common/base/status_macros.h"
#include "worker/device/device_checks.h"

#include <cblas.h>

#include <algorithm>
#include <cmath>
#include <cstring>
#include <new>

#include "absl/strings/str_format.h"
#include "worker/device/cpu/cpu_batch_norm_ops.h"
#include "worker/device/cpu/cpu_conv.h"
#include "worker/device/cpu/cpu_image_ops.h"

namespace lockstep {
namespace {

// 64 bytes is a cache line and the widest vector (AVX-512) OpenBLAS uses.
constexpr std::align_val_t kAlignment{64};

// Host memory from an aligned operator new, zeroed as Allocate promises.
class CpuBuffer final : public DeviceBuffer {
 public:
  CpuBuffer(unsigned char* data, size_t bytes) : data_(data), bytes_(bytes) {}
  ~CpuBuffer() override { ::operator delete(data_, kAlignment); }
  CpuBuffer(const CpuBuffer&) = delete;
  CpuBuffer& operator=(const CpuBuffer&) = delete;

  void* data() override { return data_; }
  const void* data() const override { return data_; }
  size_t bytes() const override { return bytes_; }

 private:
  unsigned char* const data_;  // Owned; freed with kAlignment.
  const size_t bytes_;
};

}  // namespace

std::unique_ptr<Device> CpuDevice::Create(int num_threads, CpuConv conv) {
  num_threads = std::max(num_threads, 1);
  openblas_set_num_threads(num_threads);
  if (!cpu_ops::DirectConvAvailable()) conv = CpuConv::kIm2Col;
  return std::unique_ptr<Device>(new CpuDevice(num_threads, conv));
}

CpuDevice::CpuDevice(int num_threads, CpuConv conv)
    : num_threads_(num_threads), conv_(conv) {
  if (conv_ != CpuConv::kIm2Col) {
    conv_runner_ = std::make_unique<DirectConvRunner>(num_threads_);
  }
}

std::string CpuDevice::Name() const {
  return absl::StrFormat("cpu (OpenBLAS, %d thread%s%s)", num_threads_,
                         num_threads_ == 1 ? "" : "s",
                         conv_ == CpuConv::kAuto ? ", AVX-512 convolutions"
                         : conv_ == CpuConv::kDirect
                             ? ", AVX-512 convolutions only"
                             : "");
}

absl::StatusOr<std::unique_ptr<DeviceBuffer>> CpuDevice::Allocate(
    size_t bytes) {
  // Never a zero-byte request, so every buffer has a distinct address.
  const size_t size = std::max<size_t>(bytes, 1);
  auto* data = static_cast<unsigned char*>(
      ::operator new(size, kAlignment, std::nothrow));
  if (data == nullptr) {
    return absl::ResourceExhaustedError(
        absl::StrFormat("cpu device: cannot allocate %d bytes", bytes));
  }
  std::memset(data, 0, size);
  return std::unique_ptr<DeviceBuffer>(new CpuBuffer(data, bytes));
}

absl::StatusOr<std::unique_ptr<DeviceBuffer>> CpuDevice::AllocateHost(
    size_t bytes) {
  // Device memory is host memory here, so staging buffers are the same.
  return Allocate(bytes);
}

absl::Status CpuDevice::CopyToDevice(const void* src, void* dst, size_t bytes) {
  ASSIGN_OR_RETURN(const int64_t work,
                   CheckCopyArgs("CopyToDevice", bytes, src, dst));
  if (work > 0) std::memmove(dst, src, bytes);
  return absl::OkStatus();
}

absl::Status CpuDevice::CopyToHost(const void* src, void* dst, size_t bytes) {
  ASSIGN_OR_RETURN(const int64_t work,
                   CheckCopyArgs("CopyToHost", bytes, src, dst));
  if (work > 0) std::memmove(dst, src, bytes);
  return absl::OkStatus();
}

absl::Status CpuDevice::CopyToHostAsync(const void* src, void* dst,
                                        size_t bytes) {
  RETURN_IF_ERROR(CheckCopyArgs("CopyToHostAsync", bytes, src, dst).status());
  return CopyToHost(src, dst, bytes);
}

absl::Status CpuDevice::Gemm(bool trans_a, bool trans_b, int m, int n, int k,
                             float alpha, const float* a, const float* b,
                             float beta, float* c) {
  ASSIGN_OR_RETURN(const int64_t outputs, CheckGemmArgs(m, n, k, a, b, c));
  if (outputs == 0) return absl::OkStatus();
  // Leading dimensions of the stored row-major matrices; BLAS insists on at
  // least 1 even when k == 0.
  const int lda = std::max(trans_a ? m : k, 1);
  const int ldb = std::max(trans_b ? k : n, 1);
  cblas_sgemm(CblasRowMajor, trans_a ? CblasTrans : CblasNoTrans,
              trans_b ? CblasTrans : CblasNoTrans, m, n, k, alpha, a, lda, b,
              ldb, beta, c, n);
  return absl::OkStatus();
}

absl::Status CpuDevice::AddBias(int rows, int cols, const float* bias,
                                float* x) {
  ASSIGN_OR_RETURN(const int64_t n, CheckAddBiasArgs(rows, cols, bias, x));
  if (n == 0) return absl::OkStatus();
  for (int r = 0; r < rows; ++r) {
    float* __restrict row = x + static_cast<size_t>(r) * cols;
    for (int c = 0; c < cols; ++c) row[c] += bias[c];
  }
  return absl::OkStatus();
}

absl::Status CpuDevice::ReluForward(size_t n, float* x) {
  RETURN_IF_ERROR(CheckReluForwardArgs(n, x, x).status());
  for (size_t i = 0; i < n; ++i) x[i] = x[i] > 0.0f ? x[i] : 0.0f;
  return absl::OkStatus();
}

absl::Status CpuDevice::ReluForwardInto(size_t n, const float* x, float* y) {
  RETURN_IF_ERROR(CheckReluForwardArgs(n, x, y).status());
  if (y == x) return ReluForward(n, y);
  const float* __restrict in = x;
  float* __restrict out = y;
  for (size_t i = 0; i < n; ++i) out[i] = in[i] > 0.0f ? in[i] : 0.0f;
  return absl::OkStatus();
}

absl::Status CpuDevice::ReluBackward(size_t n, const float* activation,
                                     float* grad) {
  RETURN_IF_ERROR(CheckReluBackwardArgs(n, activation, grad, grad).status());
  for (size_t i = 0; i < n; ++i) {
    grad[i] = activation[i] > 0.0f ? grad[i] : 0.0f;
  }
  return absl::OkStatus();
}

absl::Status CpuDevice::ReluBackwardInto(size_t n, const float* activation,
                                         const float* dy, float* dx) {
  RETURN_IF_ERROR(CheckReluBackwardArgs(n, activation, dy, dx).status());
  if (dx == dy) return ReluBackward(n, activation, dx);
  // Both loads unconditional, so the loop compiles to vector blends rather
  // than a branch per element (half of them mispredicted).
  const float* __restrict a = activation;
  const float* __restrict g = dy;
  float* __restrict out = dx;
  for (size_t i = 0; i < n; ++i) {
    const float pass = g[i];
    out[i] = a[i] > 0.0f ? pass : 0.0f;
  }
  return absl::OkStatus();
}

absl::Status CpuDevice::BiasGradient(int rows, int cols, const float* grad,
                                     float* bias_grad) {
  ASSIGN_OR_RETURN(const int64_t outputs,
                   CheckBiasGradientArgs(rows, cols, grad, bias_grad));
  if (outputs == 0) return absl::OkStatus();
  // Row by row rather than column by column: the inner loop then runs over
  // contiguous memory and vectorizes.
  std::fill(bias_grad, bias_grad + cols, 0.0f);
  for (int r = 0; r < rows; ++r) {
    const float* __restrict row = grad + static_cast<size_t>(r) * cols;
    for (int c = 0; c < cols; ++c) bias_grad[c] += row[c];
  }
  return absl::OkStatus();
}

absl::Status CpuDevice::SoftmaxCrossEntropy(
    int rows, int cols, const float* logits, const int32_t* labels,
    float grad_scale, float* grad_logits, double* loss_sum, int64_t* correct) {
  RETURN_IF_ERROR(CheckSoftmaxCrossEntropyArgs(rows, cols, logits, labels,
                                               loss_sum, correct));
  if (rows == 0) return absl::OkStatus();
  // Labels come from data files; check them all before writing anything, so
  // a bad batch leaves the outputs untouched.
  for (int r = 0; r < rows; ++r) {
    if (labels[r] < 0 || labels[r] >= cols) {
      return absl::InvalidArgumentError(absl::StrFormat(
          "SoftmaxCrossEntropy: label %d of row %d is outside [0, %d)",
          labels[r], r, cols));
    }
  }
  double loss = 0.0;
  int64_t hits = 0;
  for (int r = 0; r < rows; ++r) {
    const float* z = logits + static_cast<size_t>(r) * cols;
    const int label = labels[r];
    // Strict '>' keeps the lowest index among ties, as numpy's argmax does.
    float max = z[0];
    int arg_max = 0;
    for (int c = 1; c < cols; ++c) {
      if (z[c] > max) {
        max = z[c];
        arg_max = c;
      }
    }
    // Shifting by the max keeps exp() in range; the sum is in double so that
    // log() of it loses nothing for wide rows.
    double sum = 0.0;
    if (grad_logits != nullptr) {
      float* g = grad_logits + static_cast<size_t>(r) * cols;
      for (int c = 0; c < cols; ++c) {
        const float e = std::exp(z[c] - max);
        g[c] = e;
        sum += e;
      }
      const float scale = static_cast<float>(grad_scale / sum);
      for (int c = 0; c < cols; ++c) g[c] *= scale;
      g[label] -= grad_scale;
    } else {
      for (int c = 0; c < cols; ++c) sum += std::exp(z[c] - max);
    }
    loss += std::log(sum) - (static_cast<double>(z[label]) - max);
    hits += arg_max == label ? 1 : 0;
  }
  *loss_sum += loss;
  *correct += hits;
  return absl::OkStatus();
}

absl::Status CpuDevice::Axpy(size_t n, float alpha, const float* x, float* y) {
  RETURN_IF_ERROR(CheckAxpyArgs(n, x, y));
  if (n == 0) return absl::OkStatus();
  // Plain loop rather than cblas_saxpy: n may exceed BLAS's int.
  const float* __restrict in = x;
  float* __restrict out = y;
  for (size_t i = 0; i < n; ++i) out[i] += alpha * in[i];
  return absl::OkStatus();
}

absl::Status CpuDevice::CopyOnDevice(const void* src, void* dst, size_t bytes) {
  RETURN_IF_ERROR(CheckCopyOnDeviceArgs(bytes, src, dst));
  if (bytes == 0) return absl::OkStatus();
  std::memmove(dst, src, bytes);
  return absl::OkStatus();
}

bool CpuDevice::HasDirectConv(const WindowGeometry& window, int filters) const {
  if (conv_ != CpuConv::kAuto) return conv_ == CpuConv::kDirect;
  // Where the direct kernels win, measured layer by layer against im2col +
  // OpenBLAS on ResNet-20's and ResNet-50's convolutions (lockstep_bench
  // conv, docs/benchmarks.md): everywhere but where each image has a single
  // output pixel and the kernel taps its window has inside the image hold
  // more than 4 MiB (one layer of ResNet-50 at 32x32 input, 8 MiB). There
  // each kernel float serves one pixel per image, and transposing the kernel
  // for the input gradient costs more than the products.
  constexpr int64_t kMaxSinglePixelKernelBytes = int64_t{4} << 20;
  if (int64_t{window.out_height} * window.out_width != 1) return true;
  auto inside = [](int64_t window_size, int64_t pad, int64_t image_size) {
    return std::max<int64_t>(0, std::min(window_size, pad + image_size) - pad);
  };
  const int64_t taps =
      inside(window.window_height, window.pad_top, window.input.height) *
      inside(window.window_width, window.pad_left, window.input.width);
  return taps * window.input.channels * filters * int64_t{sizeof(float)} <=
         kMaxSinglePixelKernelBytes;
}

absl::Status CpuDevice::ConvForward(const WindowGeometry& window, int filters,
                                    const float* x, const float* kernel,
                                    float* y) {
  if (conv_ == CpuConv::kIm2Col) {
    return Device::ConvForward(window, filters, x, kernel, y);
  }
  return conv_runner_->Forward(window, filters, x, kernel, y);
}

absl::Status CpuDevice::ConvBackwardData(const WindowGeometry& window,
                                         int filters, const float* dy,
                                         const float* kernel, float* dx) {
  if (conv_ == CpuConv::kIm2Col) {
    return Device::ConvBackwardData(window, filters, dy, kernel, dx);
  }
  return conv_runner_->BackwardData(window, filters, dy, kernel, dx);
}

absl::Status CpuDevice::ConvBackwardFilter(const WindowGeometry& window,
                                           int filters, const float* x,
                                           const float* dy,
                                           float* kernel_grad) {
  if (conv_ == CpuConv::kIm2Col) {
    return Device::ConvBackwardFilter(window, filters, x, dy, kernel_grad);
  }
  return conv_runner_->BackwardFilter(window, filters, x, dy, kernel_grad);
}

absl::Status CpuDevice::Im2Col(const WindowGeometry& window, const float* image,
                               float* columns) {
  return cpu_ops::Im2Col(window, image, columns);
}

absl::Status CpuDevice::Col2Im(const WindowGeometry& window,
                               const float* columns, float* image) {
  return cpu_ops::Col2Im(window, columns, image);
}

absl::Status CpuDevice::MaxPoolForward(const WindowGeometry& window,
                                       const float* x, float* y,
                                       int32_t* argmax) {
  return cpu_ops::MaxPoolForward(window, x, y, argmax);
}

absl::Status CpuDevice::MaxPoolBackward(const WindowGeometry& window,
                                        const float* dy, const int32_t* argmax,
                                        float* dx) {
  return cpu_ops::MaxPoolBackward(window, dy, argmax, dx);
}

absl::Status CpuDevice::ZeroPad2D(const NhwcShape& x_shape,
                                  const Padding2D& padding, const float* x,
                                  float* y) {
  return cpu_ops::ZeroPad2D(x_shape, padding, x, y);
}

absl::Status CpuDevice::ZeroPad2DBackward(const NhwcShape& x_shape,
                                          const Padding2D& padding,
                                          const float* dy, float* dx) {
  return cpu_ops::ZeroPad2DBackward(x_shape, padding, dy, dx);
}

absl::Status CpuDevice::GlobalAvgPool(int batch, int pixels, int channels,
                                      const float* x, float* y) {
  return cpu_ops::GlobalAvgPool(batch, pixels, channels, x, y);
}

absl::Status CpuDevice::GlobalAvgPoolBackward(int batch, int pixels,
                                              int channels, const float* dy,
                                              float* dx) {
  return cpu_ops::GlobalAvgPoolBackward(batch, pixels, channels, dy, dx);
}

absl::Status CpuDevice::BatchNormTraining(
    int rows, int channels, const float* x, const float* gamma,
    const float* beta, float epsilon, float momentum, float* y,
    float* moving_mean, float* moving_variance, float* saved_mean,
    float* saved_inv_std) {
  return cpu_ops::BatchNormTraining(rows, channels, x, gamma, beta, epsilon,
                                    momentum, y, moving_mean, moving_variance,
                                    saved_mean, saved_inv_std);
}

absl::Status CpuDevice::BatchNormInference(int rows, int channels,
                                           const float* x, const float* gamma,
                                           const float* beta,
                                           const float* moving_mean,
                                           const float* moving_variance,
                                           float epsilon, float* y) {
  return cpu_ops::BatchNormInference(rows, channels, x, gamma, beta,
                                     moving_mean, moving_variance, epsilon, y);
}

absl::Status CpuDevice::BatchNormBackward(int rows, int channels,
                                          const float* x, const float* dy,
                                          const float* gamma,
                                          const float* saved_mean,
                                          const float* saved_inv_std, float* dx,
                                          float* dgamma, float* dbeta) {
  return cpu_ops::BatchNormBackward(rows, channels, x, dy, gamma, saved_mean,
                                    saved_inv_std, dx, dgamma, dbeta);
}

absl::Status CpuDevice::Synchronize() { return absl::OkStatus(); }

}  // namespace lockstep
