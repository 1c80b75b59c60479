#include "worker/cpu_conv.h"

#include <immintrin.h>

#include <algorithm>
#include <cstdint>
#include <cstring>

#include "absl/strings/str_format.h"
#include "common/status_macros.h"
#include "worker/cpu_conv_tiles.h"
#include "worker/device_checks.h"

namespace lockstep {
namespace cpu_ops {
namespace {

using conv_tiles::BackwardDataArgs;
using conv_tiles::BackwardDataKernel;
using conv_tiles::BackwardFilterArgs;
using conv_tiles::BackwardFilterKernel;
using conv_tiles::ForwardArgs;
using conv_tiles::ForwardKernel;
using conv_tiles::kLanes;
using conv_tiles::kMaxVectors;
using conv_tiles::MaxTile;
using conv_tiles::RunTile;

int64_t RoundUpToLanes(int64_t n) { return (n + kLanes - 1) / kLanes * kLanes; }

// The image every window reads, its padding made explicit: `rows` x `cols`
// pixels, of which pixel (pad_top, pad_left) is the input's (0, 0); output
// pixel (oh, ow)'s window starts at (oh * stride_height, ow * stride_width).
// `in_place` when the input itself serves (no window reaches outside it).
struct Padded {
  int64_t rows = 0;
  int64_t cols = 0;
  bool in_place = false;

  int64_t Size(int channels) const { return rows * cols * channels; }
};

Padded PaddedFor(const WindowGeometry& g) {
  Padded p;
  p.rows = int64_t{g.out_height - 1} * g.stride_height + g.window_height;
  p.cols = int64_t{g.out_width - 1} * g.stride_width + g.window_width;
  if (g.pad_top == 0 && g.pad_left == 0 && p.rows <= g.input.height &&
      p.cols <= g.input.width) {
    p = {g.input.height, g.input.width, true};
  }
  return p;
}

// Copies image `x` (one of window.input's) into `xp`, zeros around it.
void PadImage(const WindowGeometry& g, const Padded& p, const float* x,
              float* xp) {
  const int64_t c = g.input.channels;
  const int64_t left = std::min<int64_t>(g.pad_left, p.cols);
  const int64_t inside =
      std::clamp<int64_t>(p.cols - g.pad_left, 0, g.input.width);
  for (int64_t r = 0; r < p.rows; ++r) {
    float* dst = xp + r * p.cols * c;
    const int64_t h = r - g.pad_top;
    if (h < 0 || h >= g.input.height) {
      std::memset(dst, 0, sizeof(float) * p.cols * c);
      continue;
    }
    std::memset(dst, 0, sizeof(float) * left * c);
    std::memcpy(dst + left * c, x + h * g.input.width * c,
                sizeof(float) * inside * c);
    std::memset(dst + (left + inside) * c, 0,
                sizeof(float) * (p.cols - left - inside) * c);
  }
}

// The inverse direction for gradients: dx = the part of `dxp` that PadImage
// would fill from x; input pixels no window reads get zero.
void UnpadImage(const WindowGeometry& g, const Padded& p, const float* dxp,
                float* dx) {
  const int64_t c = g.input.channels, width = g.input.width;
  for (int64_t h = 0; h < g.input.height; ++h) {
    float* dst = dx + h * width * c;
    const int64_t r = h + g.pad_top;
    const int64_t inside =
        r < p.rows ? std::clamp<int64_t>(p.cols - g.pad_left, 0, width) : 0;
    if (inside > 0) {
      std::memcpy(dst, dxp + (r * p.cols + g.pad_left) * c,
                  sizeof(float) * inside * c);
    }
    std::memset(dst + inside * c, 0, sizeof(float) * (width - inside) * c);
  }
}

// Splits `n` items into the fewest tiles of at most `max_tile`, of sizes
// that differ by at most one; calls visit(first, size) for each.
template <typename Visit>
void ForEachTile(int64_t n, int max_tile, Visit visit) {
  const int64_t tiles = (n + max_tile - 1) / max_tile;
  if (tiles == 0) return;
  const int64_t base = n / tiles, extra = n % tiles;
  int64_t first = 0;
  for (int64_t t = 0; t < tiles; ++t) {
    const int64_t size = base + (t < extra ? 1 : 0);
    visit(first, static_cast<int>(size));
    first += size;
  }
}

// The lanes of a tile's last vector that hold real outputs.
__mmask16 TailMask(int64_t count) {
  const int64_t rem = count % kLanes;
  return rem == 0 ? __mmask16{0xFFFF} : static_cast<__mmask16>((1u << rem) - 1);
}

// Calls visit(v0, v, last) for the blocks of at most kMaxVectors vectors
// that cover `count` channels: vectors v0 ... v0 + v - 1, `last` the real
// lanes of the block's last vector.
template <typename Visit>
void ForEachVectorBlock(int64_t count, Visit visit) {
  const int64_t vectors = RoundUpToLanes(count) / kLanes;
  for (int64_t v0 = 0; v0 < vectors; v0 += kMaxVectors) {
    const int v =
        static_cast<int>(std::min<int64_t>(kMaxVectors, vectors - v0));
    visit(v0, v, v0 + v == vectors ? TailMask(count) : __mmask16{0xFFFF});
  }
}

// Image n of x as the kernels read it: x's own, or padded into scratch.
const float* PaddedInput(const WindowGeometry& g, const Padded& p,
                         const float* x, int n, ConvScratch* s) {
  const float* image = x + n * g.input.ImageSize();
  if (p.in_place) return image;
  PadImage(g, p, image, s->image.data());
  return s->image.data();
}

// The whole passes, per image, over blocks of up to kMaxVectors vectors of
// output channels (forward, kernel gradient) or input channels (input
// gradient).
void Forward(const WindowGeometry& g, int filters, const float* x,
             const float* kernel, float* y, ConvScratch* s) {
  const int64_t c = g.input.channels;
  const int64_t taps = int64_t{g.window_height} * g.window_width * c;
  const int64_t padded_filters = RoundUpToLanes(filters);
  // Filters padded to whole vectors, with zeros, unless they fill them.
  if (padded_filters != filters) {
    s->kernel.assign(taps * padded_filters, 0.0f);
    for (int64_t t = 0; t < taps; ++t) {
      std::memcpy(&s->kernel[t * padded_filters], kernel + t * filters,
                  sizeof(float) * filters);
    }
    kernel = s->kernel.data();
  }
  const Padded p = PaddedFor(g);
  if (!p.in_place) s->image.resize(p.Size(c));
  ForwardArgs a;
  a.pixel_step = g.stride_width * c;
  a.row_step = p.cols * c;
  a.window_height = g.window_height;
  a.window_width = g.window_width;
  a.channels = static_cast<int>(c);
  a.kernel_row = padded_filters;
  a.out_pixel = filters;
  const int64_t out_image = int64_t{g.out_height} * g.out_width * filters;
  for (int n = 0; n < g.input.batch; ++n) {
    const float* image = PaddedInput(g, p, x, n, s);
    float* out_image_ptr = y + n * out_image;
    ForEachVectorBlock(filters, [&](int64_t v0, int v, __mmask16 last) {
      a.kernel = kernel + v0 * kLanes;
      a.last = last;
      for (int oh = 0; oh < g.out_height; ++oh) {
        const float* in_row =
            image + int64_t{oh} * g.stride_height * a.row_step;
        float* out_row =
            out_image_ptr + int64_t{oh} * g.out_width * filters + v0 * kLanes;
        ForEachTile(g.out_width, MaxTile(v), [&](int64_t ow, int r) {
          RunTile<ForwardKernel>(v, r, a, in_row + ow * a.pixel_step,
                                 out_row + ow * filters);
        });
      }
    });
  }
}

void BackwardData(const WindowGeometry& g, int filters, const float* dy,
                  const float* kernel, float* dx, ConvScratch* s) {
  const int64_t c = g.input.channels;
  const int64_t padded_c = RoundUpToLanes(c);
  const int64_t area = int64_t{g.window_height} * g.window_width;
  // The kernel transposed to [i][j][f][c], channels padded with zeros.
  s->kernel.assign(area * filters * padded_c, 0.0f);
  for (int64_t t = 0; t < area; ++t) {
    for (int64_t ci = 0; ci < c; ++ci) {
      const float* src = kernel + (t * c + ci) * filters;
      float* dst = &s->kernel[t * filters * padded_c + ci];
      for (int64_t f = 0; f < filters; ++f) dst[f * padded_c] = src[f];
    }
  }
  const Padded p = PaddedFor(g);
  if (!p.in_place) s->image.resize(p.Size(c));
  BackwardDataArgs a;
  a.pixel_step = g.stride_width * c;
  a.row_step = p.cols * c;
  a.window_height = g.window_height;
  a.window_width = g.window_width;
  a.channels = static_cast<int>(c);
  a.filters = filters;
  a.kernel_t_row = padded_c;
  const int64_t out_image = int64_t{g.out_height} * g.out_width * filters;
  for (int n = 0; n < g.input.batch; ++n) {
    float* grad = dx + n * g.input.ImageSize();
    float* padded = p.in_place ? grad : s->image.data();
    std::memset(padded, 0, sizeof(float) * p.Size(c));
    const float* dy_image = dy + n * out_image;
    ForEachVectorBlock(c, [&](int64_t v0, int v, __mmask16 last) {
      a.kernel_t = s->kernel.data() + v0 * kLanes;
      a.last = last;
      for (int oh = 0; oh < g.out_height; ++oh) {
        float* dst_row =
            padded + int64_t{oh} * g.stride_height * a.row_step + v0 * kLanes;
        const float* dy_row = dy_image + int64_t{oh} * g.out_width * filters;
        ForEachTile(g.out_width, MaxTile(v), [&](int64_t ow, int r) {
          RunTile<BackwardDataKernel>(v, r, a, dy_row + ow * filters,
                                      dst_row + ow * a.pixel_step);
        });
      }
    });
    if (!p.in_place) UnpadImage(g, p, padded, grad);
  }
}

void BackwardFilter(const WindowGeometry& g, int filters, const float* x,
                    const float* dy, float* kernel_grad, ConvScratch* s) {
  const int64_t c = g.input.channels;
  const int64_t taps = int64_t{g.window_height} * g.window_width * c;
  const int64_t padded_filters = RoundUpToLanes(filters);
  s->kernel_grad.assign(taps * padded_filters, 0.0f);
  const Padded p = PaddedFor(g);
  if (!p.in_place) s->image.resize(p.Size(c));
  BackwardFilterArgs a;
  a.pixel_step = g.stride_width * c;
  a.row_step = g.stride_height * p.cols * c;
  a.out_height = g.out_height;
  a.out_width = g.out_width;
  a.filters = filters;
  a.grad_row = padded_filters;
  const int64_t out_image = int64_t{g.out_height} * g.out_width * filters;
  for (int n = 0; n < g.input.batch; ++n) {
    const float* image = PaddedInput(g, p, x, n, s);
    const float* dy_image = dy + n * out_image;
    ForEachVectorBlock(filters, [&](int64_t v0, int v, __mmask16 last) {
      a.last = last;
      for (int i = 0; i < g.window_height; ++i) {
        for (int j = 0; j < g.window_width; ++j) {
          const float* tap = image + (i * p.cols + j) * c;
          float* grad =
              s->kernel_grad.data() +
              ((int64_t{i} * g.window_width + j) * c) * padded_filters +
              v0 * kLanes;
          ForEachTile(c, MaxTile(v), [&](int64_t c0, int r) {
            RunTile<BackwardFilterKernel>(v, r, a, tap + c0,
                                          dy_image + v0 * kLanes,
                                          grad + c0 * padded_filters);
          });
        }
      }
    });
  }
  for (int64_t t = 0; t < taps; ++t) {
    std::memcpy(kernel_grad + t * filters, &s->kernel_grad[t * padded_filters],
                sizeof(float) * filters);
  }
}

absl::Status Unavailable(const char* op) {
  return absl::FailedPreconditionError(absl::StrFormat(
      "%s: this processor has no AVX-512F for the direct convolution", op));
}

}  // namespace

bool DirectConvAvailable() {
  static const bool available = __builtin_cpu_supports("avx512f");
  return available;
}

absl::Status DirectConvForward(const WindowGeometry& window, int filters,
                               const float* x, const float* kernel, float* y,
                               ConvScratch* scratch) {
  ASSIGN_OR_RETURN(const int64_t outputs,
                   CheckConvForwardArgs(window, filters, x, kernel, y));
  if (outputs == 0) return absl::OkStatus();
  if (!DirectConvAvailable()) return Unavailable("DirectConvForward");
  if (window.input.Size() == 0) {  // Every window lies in the padding.
    std::memset(y, 0, sizeof(float) * outputs);
    return absl::OkStatus();
  }
  Forward(window, filters, x, kernel, y, scratch);
  return absl::OkStatus();
}

absl::Status DirectConvBackwardData(const WindowGeometry& window, int filters,
                                    const float* dy, const float* kernel,
                                    float* dx, ConvScratch* scratch) {
  ASSIGN_OR_RETURN(const int64_t inputs,
                   CheckConvBackwardDataArgs(window, filters, dy, kernel, dx));
  if (inputs == 0) return absl::OkStatus();
  if (!DirectConvAvailable()) return Unavailable("DirectConvBackwardData");
  if (window.OutputPixels() == 0) {
    std::memset(dx, 0, sizeof(float) * inputs);
    return absl::OkStatus();
  }
  BackwardData(window, filters, dy, kernel, dx, scratch);
  return absl::OkStatus();
}

absl::Status DirectConvBackwardFilter(const WindowGeometry& window, int filters,
                                      const float* x, const float* dy,
                                      float* kernel_grad,
                                      ConvScratch* scratch) {
  ASSIGN_OR_RETURN(
      const int64_t weights,
      CheckConvBackwardFilterArgs(window, filters, x, dy, kernel_grad));
  if (weights == 0) return absl::OkStatus();
  if (!DirectConvAvailable()) return Unavailable("DirectConvBackwardFilter");
  if (window.OutputPixels() == 0 || window.input.Size() == 0) {
    std::memset(kernel_grad, 0, sizeof(float) * weights);
    return absl::OkStatus();
  }
  BackwardFilter(window, filters, x, dy, kernel_grad, scratch);
  return absl::OkStatus();
}

}  // namespace cpu_ops
}  // namespace lockstep
