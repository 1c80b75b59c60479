// The image ops of Device (device.h) one output element at a time, for the
// CUDA kernels: each function computes the element at a flat `index` from
// its inputs alone, so a kernel is a loop of threads over the indices and
// never needs atomics. The gathers add their terms in the order the CPU
// device's loops do, so Col2Im, max pooling and its gradient, padding and
// global average pooling give the CPU device's results bit for bit.
//
// The header is plain C++ that nvcc also compiles (LOCKSTEP_HOST_DEVICE
// marks the functions __host__ __device__ there), so the unit tests run the
// very code the GPU runs, on the CPU, against the CPU device
// (tests/unit/image_op_elements_test.cc). It includes nothing that nvcc
// cannot read: no Abseil, no image_geometry.h; Window is WindowGeometry's
// plain copy (image_geometry.h converts).
//
// `Index` is the type of the flat indices: int32_t when every buffer of a
// call has fewer than 2^31 elements (cheaper division on a GPU), else
// int64_t. Window positions (oh * stride - pad + i) are computed in Index:
// ValidateWindow refuses geometries whose positions would not fit in int.
#ifndef LOCKSTEP_WORKER_DEVICE_IMAGE_OP_ELEMENTS_H_
#define LOCKSTEP_WORKER_DEVICE_IMAGE_OP_ELEMENTS_H_

#include <cmath>
#include <cstdint>

#if defined(__CUDACC__)
#define LOCKSTEP_HOST_DEVICE __host__ __device__
#else
#define LOCKSTEP_HOST_DEVICE
#endif

namespace lockstep {
namespace elements {

// WindowGeometry's fields (see image_geometry.h for their meaning).
struct Window {
  int batch, height, width, channels;
  int window_height, window_width;
  int stride_height, stride_width;
  int pad_top, pad_left;
  int out_height, out_width;
};

// NhwcShape and Padding2D's fields, for ZeroPad2D.
struct Pad {
  int batch, height, width, channels;
  int top, bottom, left, right;
};

// ---- Im2Col and Col2Im ----

// columns[index] of Device::Im2Col: row (n, oh, ow), column (i, j, c).
template <typename Index>
LOCKSTEP_HOST_DEVICE inline float Im2ColAt(const Window& g, const float* image,
                                           Index index) {
  const Index channels = g.channels;
  const Index patch = Index{g.window_height} * g.window_width * channels;
  const Index row = index / patch;
  const Index col = index - row * patch;
  const Index c = col % channels;
  const Index j = (col / channels) % g.window_width;
  const Index i = col / (channels * g.window_width);
  const Index ow = row % g.out_width;
  const Index oh = (row / g.out_width) % g.out_height;
  const Index n = row / (Index{g.out_width} * g.out_height);
  const Index h = oh * g.stride_height - g.pad_top + i;
  const Index w = ow * g.stride_width - g.pad_left + j;
  if (h < 0 || h >= g.height || w < 0 || w >= g.width) return 0.0f;
  return image[((n * g.height + h) * g.width + w) * channels + c];
}

// image[index] of Device::Col2Im: the sum of the column entries that Im2Col
// reads from pixel (n, h, w), channel c. The windows holding the pixel are
// visited in output order, (oh, ow) rising -- the offsets (i, j) inside them
// falling -- as the CPU device adds them.
template <typename Index>
LOCKSTEP_HOST_DEVICE inline float Col2ImAt(const Window& g,
                                           const float* columns, Index index) {
  const Index channels = g.channels;
  const Index c = index % channels;
  const Index pixel = index / channels;
  const Index w = pixel % g.width;
  const Index h = (pixel / g.width) % g.height;
  const Index n = pixel / (Index{g.width} * g.height);
  const Index patch = Index{g.window_height} * g.window_width * channels;
  float sum = 0.0f;
  for (int i = g.window_height - 1; i >= 0; --i) {
    const Index top = h + g.pad_top - i;  // oh * stride_height, if a window.
    if (top < 0 || top % g.stride_height != 0) continue;
    const Index oh = top / g.stride_height;
    if (oh >= g.out_height) continue;
    for (int j = g.window_width - 1; j >= 0; --j) {
      const Index left = w + g.pad_left - j;
      if (left < 0 || left % g.stride_width != 0) continue;
      const Index ow = left / g.stride_width;
      if (ow >= g.out_width) continue;
      const Index row = (n * g.out_height + oh) * g.out_width + ow;
      sum +=
          columns[row * patch + (Index{i} * g.window_width + j) * channels + c];
    }
  }
  return sum;
}

// ---- Max pooling ----

// The outputs (oh, ow) whose windows hold input row h (or column: pass the
// width's numbers): [first, last], empty when first > last.
struct OutputRange {
  int first;
  int last;
};
LOCKSTEP_HOST_DEVICE inline OutputRange WindowsHolding(int h, int pad,
                                                       int window, int stride,
                                                       int outputs) {
  // oh * stride - pad <= h < oh * stride - pad + window. ValidateWindow
  // keeps h + pad within int; the rounding up below cannot overflow even
  // for a stride near INT_MAX (low + stride - 1 could).
  const int top = h + pad;  // >= 0.
  const int low = top - window + 1;
  const int first = low <= 0 ? 0 : (low - 1) / stride + 1;
  const int last = top / stride < outputs - 1 ? top / stride : outputs - 1;
  return {first, last};
}

// y[index] and argmax[index] of Device::MaxPoolForward: the first largest
// pixel in row-major order within the window's part inside the image; 0
// and -1 for a window wholly in the padding.
template <typename Index>
LOCKSTEP_HOST_DEVICE inline void MaxPoolAt(const Window& g, const float* x,
                                           Index index, float* y,
                                           int32_t* argmax) {
  const Index channels = g.channels;
  const int c = static_cast<int>(index % channels);
  const Index pixel = index / channels;
  const int ow = static_cast<int>(pixel % g.out_width);
  const int oh = static_cast<int>((pixel / g.out_width) % g.out_height);
  const Index n = pixel / (Index{g.out_width} * g.out_height);
  const int h0 = oh * g.stride_height - g.pad_top;
  const int w0 = ow * g.stride_width - g.pad_left;
  const int h_begin = h0 > 0 ? h0 : 0;
  const int h_end =
      h0 + g.window_height < g.height ? h0 + g.window_height : g.height;
  const int w_begin = w0 > 0 ? w0 : 0;
  const int w_end =
      w0 + g.window_width < g.width ? w0 + g.window_width : g.width;
  if (h_begin >= h_end || w_begin >= w_end) {
    y[index] = 0.0f;
    argmax[index] = -1;
    return;
  }
  const float* image = x + n * g.height * g.width * channels;
  int32_t best_at = (h_begin * g.width + w_begin) * g.channels + c;
  float best = image[best_at];
  for (int h = h_begin; h < h_end; ++h) {
    for (int w = w_begin; w < w_end; ++w) {
      const int32_t at = (h * g.width + w) * g.channels + c;
      if (image[at] > best) {
        best = image[at];
        best_at = at;
      }
    }
  }
  y[index] = best;
  argmax[index] = best_at;
}

// dx[index] of Device::MaxPoolBackward: the sum of dy over the windows
// holding the element whose argmax names it, in output order. An argmax
// that names no element of its window adds nothing anywhere.
template <typename Index>
LOCKSTEP_HOST_DEVICE inline float MaxPoolGradAt(const Window& g,
                                                const float* dy,
                                                const int32_t* argmax,
                                                Index index) {
  const Index channels = g.channels;
  const int c = static_cast<int>(index % channels);
  const Index pixel = index / channels;
  const int w = static_cast<int>(pixel % g.width);
  const int h = static_cast<int>((pixel / g.width) % g.height);
  const Index n = pixel / (Index{g.width} * g.height);
  const int32_t self = (h * g.width + w) * g.channels + c;
  const OutputRange rows = WindowsHolding(h, g.pad_top, g.window_height,
                                          g.stride_height, g.out_height);
  const OutputRange cols = WindowsHolding(w, g.pad_left, g.window_width,
                                          g.stride_width, g.out_width);
  float sum = 0.0f;
  for (int oh = rows.first; oh <= rows.last; ++oh) {
    for (int ow = cols.first; ow <= cols.last; ++ow) {
      const Index k =
          ((n * g.out_height + oh) * g.out_width + ow) * channels + c;
      if (argmax[k] == self) sum += dy[k];
    }
  }
  return sum;
}

// ---- Zero padding ----

// y[index] of Device::ZeroPad2D.
template <typename Index>
LOCKSTEP_HOST_DEVICE inline float ZeroPadAt(const Pad& p, const float* x,
                                            Index index) {
  const Index out_width = Index{p.width} + p.left + p.right;
  const Index out_height = Index{p.height} + p.top + p.bottom;
  const Index c = index % p.channels;
  const Index pixel = index / p.channels;
  const Index w = pixel % out_width - p.left;
  const Index h = (pixel / out_width) % out_height - p.top;
  const Index n = pixel / (out_width * out_height);
  if (h < 0 || h >= p.height || w < 0 || w >= p.width) return 0.0f;
  return x[((n * p.height + h) * p.width + w) * p.channels + c];
}

// dx[index] of Device::ZeroPad2DBackward.
template <typename Index>
LOCKSTEP_HOST_DEVICE inline float ZeroPadGradAt(const Pad& p, const float* dy,
                                                Index index) {
  const Index out_width = Index{p.width} + p.left + p.right;
  const Index out_height = Index{p.height} + p.top + p.bottom;
  const Index c = index % p.channels;
  const Index pixel = index / p.channels;
  const Index w = pixel % p.width;
  const Index h = (pixel / p.width) % p.height;
  const Index n = pixel / (Index{p.width} * p.height);
  return dy[((n * out_height + h + p.top) * out_width + w + p.left) *
                p.channels +
            c];
}

// ---- Global average pooling ----

// y[index] of Device::GlobalAvgPool, index = n * channels + c: the float sum
// over pixels in order, times 1 / pixels.
template <typename Index>
LOCKSTEP_HOST_DEVICE inline float GlobalAvgPoolAt(int pixels, int channels,
                                                  const float* x, Index index) {
  const Index n = index / channels;
  const Index c = index - n * channels;
  const float* image = x + n * pixels * channels + c;
  float sum = 0.0f;
  for (int p = 0; p < pixels; ++p) sum += image[Index{p} * channels];
  return sum * (1.0f / static_cast<float>(pixels));
}

// dx[index] of Device::GlobalAvgPoolBackward.
template <typename Index>
LOCKSTEP_HOST_DEVICE inline float GlobalAvgPoolGradAt(int pixels, int channels,
                                                      const float* dy,
                                                      Index index) {
  const Index c = index % channels;
  const Index n = index / (Index{pixels} * channels);
  return dy[n * channels + c] * (1.0f / static_cast<float>(pixels));
}

// ---- Batch normalization ----
//
// A kernel sums per channel (in double) over the rows; these functions turn
// the sums into the channel's numbers and then each element, with the CPU
// device's formulas.

// What BatchNormTraining's forward pass needs per channel, with the moving
// statistics updated. `sum` is the sum of x over `rows`, `centered` the sum
// of (x - mean)^2 with mean = float(sum / rows).
struct BatchNormChannel {
  float mean;
  float inv_std;
  float scale;  // gamma * inv_std.
};
LOCKSTEP_HOST_DEVICE inline float BatchNormMean(double sum, int rows) {
  return static_cast<float>(sum / rows);
}
LOCKSTEP_HOST_DEVICE inline BatchNormChannel BatchNormTrainingChannel(
    double sum, double centered, int rows, float gamma, float epsilon,
    float momentum, float* moving_mean, float* moving_variance) {
  const float mean = BatchNormMean(sum, rows);
  const double variance = centered / rows;
  const double inv_std = 1.0 / sqrt(variance + epsilon);
  *moving_mean = static_cast<float>(momentum * double{*moving_mean} +
                                    (1.0 - momentum) * mean);
  *moving_variance = static_cast<float>(momentum * double{*moving_variance} +
                                        (1.0 - momentum) * variance);
  return {mean, static_cast<float>(inv_std),
          static_cast<float>(gamma * inv_std)};
}

// BatchNormInference's per-channel scale.
LOCKSTEP_HOST_DEVICE inline float BatchNormInferenceScale(float gamma,
                                                          float moving_variance,
                                                          float epsilon) {
  return static_cast<float>(gamma / sqrt(double{moving_variance} + epsilon));
}

// An output element, training or inference: (x - mean) * scale + beta.
LOCKSTEP_HOST_DEVICE inline float BatchNormApply(float x, float mean,
                                                 float scale, float beta) {
  return (x - mean) * scale + beta;
}

// BatchNormBackward per channel, from sum_dy = sum of dy and sum_dy_xhat =
// sum of dy * xhat over the rows (xhat = (x - mean) * inv_std, in float).
struct BatchNormGradChannel {
  float dgamma;
  float dbeta;
  float mean_dy;
  float mean_dy_xhat;
  float scale;  // gamma * inv_std.
};
LOCKSTEP_HOST_DEVICE inline float BatchNormXhat(float x, float mean,
                                                float inv_std) {
  return (x - mean) * inv_std;
}
LOCKSTEP_HOST_DEVICE inline BatchNormGradChannel BatchNormBackwardChannel(
    double sum_dy, double sum_dy_xhat, int rows, float gamma, float inv_std) {
  return {static_cast<float>(sum_dy_xhat), static_cast<float>(sum_dy),
          static_cast<float>(sum_dy / rows),
          static_cast<float>(sum_dy_xhat / rows), gamma * inv_std};
}
// dx = gamma * inv_std * (dy - mean(dy) - xhat * mean(dy * xhat)).
LOCKSTEP_HOST_DEVICE inline float BatchNormInputGrad(
    const BatchNormGradChannel& k, float dy, float xhat) {
  return k.scale * (dy - k.mean_dy - xhat * k.mean_dy_xhat);
}

}  // namespace elements
}  // namespace lockstep

#endif  // LOCKSTEP_WORKER_DEVICE_IMAGE_OP_ELEMENTS_H_
