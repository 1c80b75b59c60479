#include "worker/device/cpu/cpu_image_ops.h"

#include <algorithm>
#include <cstring>

#include "absl/strings/str_format.h"
#include "common/base/status_macros.h"
#include "worker/device/device_checks.h"

namespace lockstep {
namespace cpu_ops {
namespace {

// The columns [begin, end) of window row i that fall inside the image, for
// a window whose first column is at image column `first`.
struct ColumnRun {
  int begin;
  int end;
};
ColumnRun InsideColumns(int first, int window, int width) {
  const int begin = std::clamp(-first, 0, window);
  const int end = std::clamp(width - first, begin, window);
  return {begin, end};
}

// Calls visit(image_offset, column_offset, count) for every run of pixels
// that Im2Col copies (Col2Im adds them back): `count` floats at image_offset
// (within the batch) go to column_offset (within the im2col matrix). Within one
// window row the pixels inside the image are consecutive in NHWC memory, so a
// run is a whole window row's inside part. Padding is never visited.
template <typename Visit>
void ForEachWindowRun(const WindowGeometry& g, Visit visit) {
  const int64_t height = g.input.height, width = g.input.width;
  const int64_t channels = g.input.channels;
  const int64_t patch = g.PatchSize();
  int64_t row = 0;
  for (int n = 0; n < g.input.batch; ++n) {
    const int64_t image = n * height * width * channels;
    for (int oh = 0; oh < g.out_height; ++oh) {
      const int h0 = oh * g.stride_height - g.pad_top;
      for (int ow = 0; ow < g.out_width; ++ow, ++row) {
        const int w0 = ow * g.stride_width - g.pad_left;
        const ColumnRun run = InsideColumns(w0, g.window_width, g.input.width);
        if (run.begin == run.end) continue;
        for (int i = 0; i < g.window_height; ++i) {
          const int h = h0 + i;
          if (h < 0 || h >= height) continue;
          visit(image + ((h * width) + w0 + run.begin) * channels,
                row * patch +
                    (int64_t{i} * g.window_width + run.begin) * channels,
                (run.end - run.begin) * channels);
        }
      }
    }
  }
}

}  // namespace

absl::Status Im2Col(const WindowGeometry& g, const float* image,
                    float* columns) {
  ASSIGN_OR_RETURN(const int64_t total, CheckIm2ColArgs(g, image, columns));
  if (total == 0) return absl::OkStatus();
  // One pass over the columns, each window row written once: zeros where
  // it lies in the padding, the image run (consecutive in NHWC) elsewhere.
  const int64_t height = g.input.height, width = g.input.width;
  const int64_t channels = g.input.channels;
  const int64_t window_row = g.window_width * channels;
  float* dst = columns;
  for (int n = 0; n < g.input.batch; ++n) {
    const float* img = image + n * height * width * channels;
    for (int oh = 0; oh < g.out_height; ++oh) {
      const int h0 = oh * g.stride_height - g.pad_top;
      for (int ow = 0; ow < g.out_width; ++ow) {
        const int w0 = ow * g.stride_width - g.pad_left;
        const ColumnRun run = InsideColumns(w0, g.window_width, g.input.width);
        for (int i = 0; i < g.window_height; ++i, dst += window_row) {
          const int h = h0 + i;
          if (h < 0 || h >= height || run.begin == run.end) {
            std::fill(dst, dst + window_row, 0.0f);
            continue;
          }
          const int64_t begin = run.begin * channels, end = run.end * channels;
          std::fill(dst, dst + begin, 0.0f);
          std::copy(img + (h * width + w0) * channels + begin,
                    img + (h * width + w0) * channels + end, dst + begin);
          std::fill(dst + end, dst + window_row, 0.0f);
        }
      }
    }
  }
  return absl::OkStatus();
}

absl::Status Col2Im(const WindowGeometry& g, const float* columns,
                    float* image) {
  ASSIGN_OR_RETURN(const int64_t size, CheckCol2ImArgs(g, columns, image));
  if (size == 0) return absl::OkStatus();
  std::fill(image, image + size, 0.0f);
  ForEachWindowRun(g, [&](int64_t to, int64_t from, int64_t count) {
    float* __restrict dst = image + to;
    const float* __restrict src = columns + from;
    for (int64_t k = 0; k < count; ++k) dst[k] += src[k];
  });
  return absl::OkStatus();
}

absl::Status MaxPoolForward(const WindowGeometry& g, const float* x, float* y,
                            int32_t* argmax) {
  ASSIGN_OR_RETURN(const int64_t outputs,
                   CheckMaxPoolForwardArgs(g, x, y, argmax));
  if (outputs == 0) return absl::OkStatus();
  const int channels = g.input.channels;
  const int height = g.input.height, width = g.input.width;
  const int64_t image_size = g.input.ImageSize();
  int64_t pixel = 0;
  for (int n = 0; n < g.input.batch; ++n) {
    const float* image = x + n * image_size;
    for (int oh = 0; oh < g.out_height; ++oh) {
      const int h0 = oh * g.stride_height - g.pad_top;
      const int h_begin = std::max(h0, 0);
      const int h_end = std::min(h0 + g.window_height, height);
      for (int ow = 0; ow < g.out_width; ++ow, ++pixel) {
        float* __restrict out = y + pixel * channels;
        int32_t* __restrict arg = argmax + pixel * channels;
        const int w0 = ow * g.stride_width - g.pad_left;
        const int w_begin = std::max(w0, 0);
        const int w_end = std::min(w0 + g.window_width, width);
        if (h_begin >= h_end || w_begin >= w_end) {
          // A window wholly in the padding: nothing to take the max of.
          std::fill(out, out + channels, 0.0f);
          std::fill(arg, arg + channels, -1);
          continue;
        }
        bool first = true;
        for (int h = h_begin; h < h_end; ++h) {
          for (int w = w_begin; w < w_end; ++w) {
            const int32_t base = (h * width + w) * channels;
            const float* __restrict in = image + base;
            if (first) {
              for (int c = 0; c < channels; ++c) {
                out[c] = in[c];
                arg[c] = base + c;
              }
              first = false;
              continue;
            }
            for (int c = 0; c < channels; ++c) {
              if (in[c] > out[c]) {
                out[c] = in[c];
                arg[c] = base + c;
              }
            }
          }
        }
      }
    }
  }
  return absl::OkStatus();
}

absl::Status MaxPoolBackward(const WindowGeometry& g, const float* dy,
                             const int32_t* argmax, float* dx) {
  ASSIGN_OR_RETURN(const int64_t size,
                   CheckMaxPoolBackwardArgs(g, dy, argmax, dx));
  if (size == 0) return absl::OkStatus();
  const int64_t per_image =
      int64_t{g.out_height} * g.out_width * g.input.channels;
  const int64_t image_size = g.input.ImageSize();
  // Indices come from MaxPoolForward, but a stale or foreign buffer must not
  // write out of bounds: check them all first.
  for (int64_t k = 0; k < per_image * g.input.batch; ++k) {
    if (argmax[k] >= image_size) {
      return absl::InvalidArgumentError(absl::StrFormat(
          "MaxPoolBackward: argmax %d at %d is outside an image of %d",
          argmax[k], k, image_size));
    }
  }
  std::fill(dx, dx + size, 0.0f);
  for (int n = 0; n < g.input.batch; ++n) {
    float* image = dx + n * image_size;
    const float* grad = dy + n * per_image;
    const int32_t* arg = argmax + n * per_image;
    for (int64_t k = 0; k < per_image; ++k) {
      if (arg[k] >= 0) image[arg[k]] += grad[k];
    }
  }
  return absl::OkStatus();
}

absl::Status ZeroPad2D(const NhwcShape& s, const Padding2D& p, const float* x,
                       float* y) {
  ASSIGN_OR_RETURN(const int64_t out_size, CheckZeroPad2DArgs(s, p, x, y));
  if (out_size == 0) return absl::OkStatus();
  const int64_t out_height = int64_t{s.height} + p.top + p.bottom;
  const int64_t out_width = int64_t{s.width} + p.left + p.right;
  const int64_t out_row = out_width * s.channels;
  std::fill(y, y + out_size, 0.0f);
  const int64_t in_row = int64_t{s.width} * s.channels;
  for (int n = 0; n < s.batch; ++n) {
    for (int h = 0; h < s.height; ++h) {
      const float* src = x + (int64_t{n} * s.height + h) * in_row;
      float* dst = y + (n * out_height + h + p.top) * out_row +
                   int64_t{p.left} * s.channels;
      std::memcpy(dst, src, in_row * sizeof(float));
    }
  }
  return absl::OkStatus();
}

absl::Status ZeroPad2DBackward(const NhwcShape& s, const Padding2D& p,
                               const float* dy, float* dx) {
  ASSIGN_OR_RETURN(const int64_t size,
                   CheckZeroPad2DBackwardArgs(s, p, dy, dx));
  if (size == 0) return absl::OkStatus();
  const int64_t out_height = int64_t{s.height} + p.top + p.bottom;
  const int64_t out_row = (int64_t{s.width} + p.left + p.right) * s.channels;
  const int64_t in_row = int64_t{s.width} * s.channels;
  for (int n = 0; n < s.batch; ++n) {
    for (int h = 0; h < s.height; ++h) {
      const float* src = dy + (n * out_height + h + p.top) * out_row +
                         int64_t{p.left} * s.channels;
      std::memcpy(dx + (int64_t{n} * s.height + h) * in_row, src,
                  in_row * sizeof(float));
    }
  }
  return absl::OkStatus();
}

absl::Status GlobalAvgPool(int batch, int pixels, int channels, const float* x,
                           float* y) {
  ASSIGN_OR_RETURN(const int64_t outputs,
                   CheckGlobalAvgPoolArgs("GlobalAvgPool", batch, pixels,
                                          channels, x, y, /*backward=*/false));
  if (outputs == 0) return absl::OkStatus();
  const float scale = 1.0f / static_cast<float>(pixels);
  for (int n = 0; n < batch; ++n) {
    float* __restrict out = y + int64_t{n} * channels;
    const float* image = x + int64_t{n} * pixels * channels;
    std::fill(out, out + channels, 0.0f);
    for (int p = 0; p < pixels; ++p) {
      const float* __restrict in = image + int64_t{p} * channels;
      for (int c = 0; c < channels; ++c) out[c] += in[c];
    }
    for (int c = 0; c < channels; ++c) out[c] *= scale;
  }
  return absl::OkStatus();
}

absl::Status GlobalAvgPoolBackward(int batch, int pixels, int channels,
                                   const float* dy, float* dx) {
  ASSIGN_OR_RETURN(
      const int64_t size,
      CheckGlobalAvgPoolArgs("GlobalAvgPoolBackward", batch, pixels, channels,
                             dy, dx, /*backward=*/true));
  if (size == 0) return absl::OkStatus();
  const float scale = 1.0f / static_cast<float>(pixels);
  for (int n = 0; n < batch; ++n) {
    const float* __restrict grad = dy + int64_t{n} * channels;
    for (int p = 0; p < pixels; ++p) {
      float* __restrict out = dx + (int64_t{n} * pixels + p) * channels;
      for (int c = 0; c < channels; ++c) out[c] = grad[c] * scale;
    }
  }
  return absl::OkStatus();
}

}  // namespace cpu_ops
}  // namespace lockstep
