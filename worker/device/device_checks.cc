#include "worker/device/device_checks.h"

#include <limits>

#include "absl/strings/str_format.h"
#include "common/base/status_macros.h"

namespace lockstep {
namespace {

absl::Status NullPointer(const char* op) {
  return absl::InvalidArgumentError(absl::StrFormat("%s: null pointer", op));
}

absl::Status CheckImageIndexable(const char* op, const NhwcShape& shape) {
  if (shape.ImageSize() > std::numeric_limits<int32_t>::max()) {
    return absl::InvalidArgumentError(absl::StrFormat(
        "%s: an image of %d x %d x %d is too large for int32 indices", op,
        shape.height, shape.width, shape.channels));
  }
  return absl::OkStatus();
}

absl::Status CheckRowsChannels(const char* op, int rows, int channels) {
  if (rows < 0 || channels < 0) {
    return absl::InvalidArgumentError(
        absl::StrFormat("%s: negative shape %d x %d", op, rows, channels));
  }
  return absl::OkStatus();
}

int64_t PaddedSize(const NhwcShape& s, const Padding2D& p) {
  return int64_t{s.batch} * (int64_t{s.height} + p.top + p.bottom) *
         (int64_t{s.width} + p.left + p.right) * s.channels;
}

absl::Status CheckFilters(const char* op, int filters) {
  if (filters < 1) {
    return absl::InvalidArgumentError(
        absl::StrFormat("%s: filters must be at least 1, got %d", op, filters));
  }
  return absl::OkStatus();
}

}  // namespace

absl::Status CheckSoftmaxCrossEntropyArgs(int rows, int cols,
                                          const float* logits,
                                          const int32_t* labels,
                                          const double* loss_sum,
                                          const int64_t* correct) {
  if (rows < 0 || cols < 1) {
    return absl::InvalidArgumentError(
        absl::StrFormat("SoftmaxCrossEntropy: bad shape %d x %d", rows, cols));
  }
  if (loss_sum == nullptr || correct == nullptr) {
    return absl::InvalidArgumentError(
        "SoftmaxCrossEntropy: null loss_sum or correct");
  }
  if (rows > 0 && (logits == nullptr || labels == nullptr)) {
    return absl::InvalidArgumentError(
        "SoftmaxCrossEntropy: null logits or labels");
  }
  return absl::OkStatus();
}

absl::StatusOr<int64_t> CheckCopyArgs(const char* op, size_t bytes,
                                      const void* src, const void* dst) {
  if (bytes > 0 && (src == nullptr || dst == nullptr)) return NullPointer(op);
  return static_cast<int64_t>(bytes);
}

absl::StatusOr<int64_t> CheckGemmArgs(int m, int n, int k, const float* a,
                                      const float* b, const float* c) {
  if (m < 0 || n < 0 || k < 0) {
    return absl::InvalidArgumentError(
        absl::StrFormat("Gemm: negative size m=%d n=%d k=%d", m, n, k));
  }
  const int64_t outputs = int64_t{m} * n;
  if (outputs == 0) return 0;
  if ((k > 0 && (a == nullptr || b == nullptr)) || c == nullptr) {
    return NullPointer("Gemm");
  }
  return outputs;
}

absl::StatusOr<int64_t> CheckAddBiasArgs(int rows, int cols, const float* bias,
                                         const float* x) {
  RETURN_IF_ERROR(CheckRowsChannels("AddBias", rows, cols));
  const int64_t n = int64_t{rows} * cols;
  if (n > 0 && (bias == nullptr || x == nullptr)) return NullPointer("AddBias");
  return n;
}

absl::StatusOr<int64_t> CheckReluForwardArgs(size_t n, const float* x,
                                             const float* y) {
  if (n > 0 && (x == nullptr || y == nullptr)) {
    return NullPointer("ReluForward");
  }
  return static_cast<int64_t>(n);
}

absl::StatusOr<int64_t> CheckReluBackwardArgs(size_t n, const float* activation,
                                              const float* dy,
                                              const float* dx) {
  if (n > 0 && (activation == nullptr || dy == nullptr || dx == nullptr)) {
    return NullPointer("ReluBackward");
  }
  return static_cast<int64_t>(n);
}

absl::StatusOr<int64_t> CheckBiasGradientArgs(int rows, int cols,
                                              const float* grad,
                                              const float* bias_grad) {
  RETURN_IF_ERROR(CheckRowsChannels("BiasGradient", rows, cols));
  if (cols > 0 && (bias_grad == nullptr || (grad == nullptr && rows > 0))) {
    return NullPointer("BiasGradient");
  }
  return cols;
}

absl::Status CheckAxpyArgs(size_t n, const float* x, const float* y) {
  if (n > 0 && (x == nullptr || y == nullptr)) return NullPointer("Axpy");
  return absl::OkStatus();
}

absl::Status CheckCopyOnDeviceArgs(size_t bytes, const void* src,
                                   const void* dst) {
  return CheckCopyArgs("CopyOnDevice", bytes, src, dst).status();
}

absl::StatusOr<int64_t> CheckIm2ColArgs(const WindowGeometry& g,
                                        const float* image,
                                        const float* columns) {
  RETURN_IF_ERROR(ValidateWindow("Im2Col", g));
  const int64_t total = g.OutputPixels() * g.PatchSize();
  if (total == 0) return 0;
  if (columns == nullptr || (image == nullptr && g.input.Size() > 0)) {
    return NullPointer("Im2Col");
  }
  return total;
}

absl::StatusOr<int64_t> CheckCol2ImArgs(const WindowGeometry& g,
                                        const float* columns,
                                        const float* image) {
  RETURN_IF_ERROR(ValidateWindow("Col2Im", g));
  const int64_t size = g.input.Size();
  if (size == 0) return 0;
  if (image == nullptr ||
      (columns == nullptr && g.OutputPixels() * g.PatchSize() > 0)) {
    return NullPointer("Col2Im");
  }
  return size;
}

absl::StatusOr<int64_t> CheckConvForwardArgs(const WindowGeometry& g,
                                             int filters, const float* x,
                                             const float* kernel,
                                             const float* y) {
  RETURN_IF_ERROR(ValidateWindow("ConvForward", g));
  RETURN_IF_ERROR(CheckFilters("ConvForward", filters));
  const int64_t total = g.OutputPixels() * filters;
  if (total == 0) return 0;
  if (y == nullptr ||
      (g.PatchSize() > 0 &&
       (kernel == nullptr || (x == nullptr && g.input.Size() > 0)))) {
    return NullPointer("ConvForward");
  }
  return total;
}

absl::StatusOr<int64_t> CheckConvBackwardDataArgs(const WindowGeometry& g,
                                                  int filters, const float* dy,
                                                  const float* kernel,
                                                  const float* dx) {
  RETURN_IF_ERROR(ValidateWindow("ConvBackwardData", g));
  RETURN_IF_ERROR(CheckFilters("ConvBackwardData", filters));
  const int64_t size = g.input.Size();
  if (size == 0) return 0;
  if (dx == nullptr ||
      (g.OutputPixels() > 0 && (dy == nullptr || kernel == nullptr))) {
    return NullPointer("ConvBackwardData");
  }
  return size;
}

absl::StatusOr<int64_t> CheckConvBackwardFilterArgs(const WindowGeometry& g,
                                                    int filters, const float* x,
                                                    const float* dy,
                                                    const float* kernel_grad) {
  RETURN_IF_ERROR(ValidateWindow("ConvBackwardFilter", g));
  RETURN_IF_ERROR(CheckFilters("ConvBackwardFilter", filters));
  const int64_t total = g.PatchSize() * filters;
  if (total == 0) return 0;
  if (kernel_grad == nullptr ||
      (g.OutputPixels() > 0 &&
       (dy == nullptr || (x == nullptr && g.input.Size() > 0)))) {
    return NullPointer("ConvBackwardFilter");
  }
  return total;
}

absl::StatusOr<int64_t> CheckMaxPoolForwardArgs(const WindowGeometry& g,
                                                const float* x, const float* y,
                                                const int32_t* argmax) {
  RETURN_IF_ERROR(ValidateWindow("MaxPoolForward", g));
  RETURN_IF_ERROR(CheckImageIndexable("MaxPoolForward", g.input));
  const int64_t total = g.OutputPixels() * g.input.channels;
  if (total == 0) return 0;
  if (x == nullptr || y == nullptr || argmax == nullptr) {
    return NullPointer("MaxPoolForward");
  }
  return total;
}

absl::StatusOr<int64_t> CheckMaxPoolBackwardArgs(const WindowGeometry& g,
                                                 const float* dy,
                                                 const int32_t* argmax,
                                                 const float* dx) {
  RETURN_IF_ERROR(ValidateWindow("MaxPoolBackward", g));
  RETURN_IF_ERROR(CheckImageIndexable("MaxPoolBackward", g.input));
  const int64_t size = g.input.Size();
  if (size == 0) return 0;
  const int64_t outputs = g.OutputPixels() * g.input.channels;
  if (dx == nullptr || ((dy == nullptr || argmax == nullptr) && outputs > 0)) {
    return NullPointer("MaxPoolBackward");
  }
  return size;
}

absl::StatusOr<int64_t> CheckZeroPad2DArgs(const NhwcShape& s,
                                           const Padding2D& p, const float* x,
                                           const float* y) {
  RETURN_IF_ERROR(ValidateShape("ZeroPad2D", s));
  RETURN_IF_ERROR(ValidatePadding("ZeroPad2D", p));
  const int64_t out_size = PaddedSize(s, p);
  if (out_size == 0) return 0;
  if (y == nullptr || (x == nullptr && s.Size() > 0)) {
    return NullPointer("ZeroPad2D");
  }
  return out_size;
}

absl::StatusOr<int64_t> CheckZeroPad2DBackwardArgs(const NhwcShape& s,
                                                   const Padding2D& p,
                                                   const float* dy,
                                                   const float* dx) {
  RETURN_IF_ERROR(ValidateShape("ZeroPad2DBackward", s));
  RETURN_IF_ERROR(ValidatePadding("ZeroPad2DBackward", p));
  if (s.Size() == 0) return 0;
  if (dy == nullptr || dx == nullptr) return NullPointer("ZeroPad2DBackward");
  return s.Size();
}

absl::StatusOr<int64_t> CheckGlobalAvgPoolArgs(const char* op, int batch,
                                               int pixels, int channels,
                                               const float* in,
                                               const float* out,
                                               bool backward) {
  if (batch < 0 || pixels < 1 || channels < 0) {
    return absl::InvalidArgumentError(
        absl::StrFormat("%s: bad shape batch %d, %d pixels, %d channels", op,
                        batch, pixels, channels));
  }
  if (int64_t{batch} * channels == 0) return 0;
  if (in == nullptr || out == nullptr) return NullPointer(op);
  return int64_t{batch} * channels * (backward ? pixels : 1);
}

absl::StatusOr<int64_t> CheckBatchNormTrainingArgs(
    int rows, int channels, const float* x, const float* gamma,
    const float* beta, const float* y, const float* moving_mean,
    const float* moving_variance, const float* saved_mean,
    const float* saved_inv_std) {
  RETURN_IF_ERROR(CheckRowsChannels("BatchNormTraining", rows, channels));
  if (rows < 1) {
    return absl::InvalidArgumentError(
        "BatchNormTraining: batch statistics need at least one row");
  }
  if (channels == 0) return 0;
  if (x == nullptr || gamma == nullptr || beta == nullptr || y == nullptr ||
      moving_mean == nullptr || moving_variance == nullptr ||
      saved_mean == nullptr || saved_inv_std == nullptr) {
    return NullPointer("BatchNormTraining");
  }
  return channels;
}

absl::StatusOr<int64_t> CheckBatchNormInferenceArgs(
    int rows, int channels, const float* x, const float* gamma,
    const float* beta, const float* moving_mean, const float* moving_variance,
    const float* y) {
  RETURN_IF_ERROR(CheckRowsChannels("BatchNormInference", rows, channels));
  const int64_t total = int64_t{rows} * channels;
  if (total == 0) return 0;
  if (x == nullptr || gamma == nullptr || beta == nullptr ||
      moving_mean == nullptr || moving_variance == nullptr || y == nullptr) {
    return NullPointer("BatchNormInference");
  }
  return total;
}

absl::StatusOr<int64_t> CheckBatchNormBackwardArgs(
    int rows, int channels, const float* x, const float* dy, const float* gamma,
    const float* saved_mean, const float* saved_inv_std, const float* dgamma,
    const float* dbeta) {
  RETURN_IF_ERROR(CheckRowsChannels("BatchNormBackward", rows, channels));
  if (rows < 1) {
    return absl::InvalidArgumentError("BatchNormBackward: no rows");
  }
  if (channels == 0) return 0;
  if (x == nullptr || dy == nullptr || gamma == nullptr ||
      saved_mean == nullptr || saved_inv_std == nullptr || dgamma == nullptr ||
      dbeta == nullptr) {
    return NullPointer("BatchNormBackward");
  }
  return channels;
}

}  // namespace lockstep
