#include "worker/cpu_conv.h"

#include <immintrin.h>

#include <algorithm>
#include <cstdint>
#include <cstring>

#include "absl/strings/str_format.h"
#include "common/status_macros.h"
#include "worker/device_checks.h"

namespace lockstep {
namespace cpu_ops {
namespace {

constexpr int kLanes = 16;  // floats in an AVX-512 vector

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

// Vectors of outputs a tile holds (V) and the most pixels (or input
// channels) it spans (R): R * V accumulators, at most 24 of the 32
// registers, the rest for the vectors being multiplied.
constexpr int kMaxVectors = 4;
constexpr int MaxTile(int vectors) {
  return vectors == 1 ? 16 : vectors == 2 ? 12 : vectors == 3 ? 8 : 6;
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

// ---- The AVX-512 kernels (compiled for AVX-512F alone, called only when
// DirectConvAvailable()). ----
#if defined(__clang__)
#pragma clang attribute push(__attribute__((target("avx512f"))), \
                             apply_to = function)
#else
#pragma GCC push_options
#pragma GCC target("avx512f")
#endif

// Tile helpers, inlined into the kernels so that the tile stays in
// registers. acc[r][v] covers floats v * 16 ... of row r.
#define LOCKSTEP_TILE_INLINE inline __attribute__((always_inline))

// acc[r][v] += x[r * x_step] * w[v * 16 ...]: one rank-one update.
template <int V, int R>
LOCKSTEP_TILE_INLINE void RankOneUpdate(__m512 (&acc)[R][V], const float* x,
                                        int64_t x_step, const float* w) {
  __m512 b[V];
#pragma GCC unroll 16
  for (int v = 0; v < V; ++v) b[v] = _mm512_loadu_ps(w + v * kLanes);
#pragma GCC unroll 16
  for (int r = 0; r < R; ++r) {
    const __m512 xr = _mm512_set1_ps(x[r * x_step]);
#pragma GCC unroll 16
    for (int v = 0; v < V; ++v) {
      acc[r][v] = _mm512_fmadd_ps(xr, b[v], acc[r][v]);
    }
  }
}

// Row r at rows + r * row_step, its last vector masked by `last`.
template <int V, int R>
LOCKSTEP_TILE_INLINE void LoadTile(__m512 (&acc)[R][V], const float* rows,
                                   int64_t row_step, __mmask16 last) {
#pragma GCC unroll 16
  for (int r = 0; r < R; ++r) {
    const float* row = rows + r * row_step;
#pragma GCC unroll 16
    for (int v = 0; v + 1 < V; ++v)
      acc[r][v] = _mm512_loadu_ps(row + v * kLanes);
    acc[r][V - 1] = _mm512_maskz_loadu_ps(last, row + (V - 1) * kLanes);
  }
}
template <int V, int R>
LOCKSTEP_TILE_INLINE void StoreTile(const __m512 (&acc)[R][V], float* rows,
                                    int64_t row_step, __mmask16 last) {
#pragma GCC unroll 16
  for (int r = 0; r < R; ++r) {
    float* row = rows + r * row_step;
#pragma GCC unroll 16
    for (int v = 0; v + 1 < V; ++v)
      _mm512_storeu_ps(row + v * kLanes, acc[r][v]);
    _mm512_mask_storeu_ps(row + (V - 1) * kLanes, last, acc[r][V - 1]);
  }
}

// Forward: R consecutive output pixels of a row x V vectors of filters.
struct ForwardArgs {
  int64_t pixel_step;  // floats between neighbouring windows (stride * c)
  int64_t row_step;    // floats between padded rows
  int window_height;
  int window_width;
  int channels;
  const float* kernel;  // at this tile's first filter
  int64_t kernel_row;   // floats per (i, j, c) row of the kernel
  int64_t out_pixel;    // floats per output pixel (filters)
  __mmask16 last;       // the real lanes of the last vector
};

template <int V, int R>
void ForwardTile(const ForwardArgs& a, const float* in, float* out) {
  __m512 acc[R][V];
#pragma GCC unroll 16
  for (int r = 0; r < R; ++r) {
#pragma GCC unroll 16
    for (int v = 0; v < V; ++v) acc[r][v] = _mm512_setzero_ps();
  }
  const int c_count = a.channels;
  for (int i = 0; i < a.window_height; ++i) {
    for (int j = 0; j < a.window_width; ++j) {
      const float* x = in + i * a.row_step + j * c_count;
      const float* w =
          a.kernel + (int64_t{i} * a.window_width + j) * c_count * a.kernel_row;
      for (int c = 0; c < c_count; ++c) {
        RankOneUpdate(acc, x + c, a.pixel_step, w);
        w += a.kernel_row;
      }
    }
  }
  StoreTile(acc, out, a.out_pixel, a.last);
}

// Input gradient: adds, for R consecutive output pixels of a row, every
// window tap's contribution to V vectors of input channels of `dst` (the
// padded gradient image); the taps go in (i, j) order.
struct BackwardDataArgs {
  int64_t pixel_step;  // floats between neighbouring windows in dst
  int64_t row_step;    // floats between padded rows
  int window_height;
  int window_width;
  int channels;           // of the input (dst's pixels)
  int filters;            // of dy
  const float* kernel_t;  // [i][j][f][c padded], at this tile's channel
  int64_t kernel_t_row;   // floats per (i, j, f) row: channels padded
  __mmask16 last;
};

template <int V, int R>
void BackwardDataTile(const BackwardDataArgs& a, const float* dy, float* dst) {
  const int f_count = a.filters;
  for (int i = 0; i < a.window_height; ++i) {
    for (int j = 0; j < a.window_width; ++j) {
      float* d = dst + i * a.row_step + j * a.channels;
      const float* w = a.kernel_t + (int64_t{i} * a.window_width + j) *
                                        f_count * a.kernel_t_row;
      __m512 acc[R][V];
      LoadTile(acc, d, a.pixel_step, a.last);
      for (int f = 0; f < f_count; ++f) {
        RankOneUpdate(acc, dy + f, f_count, w);
        w += a.kernel_t_row;
      }
      StoreTile(acc, d, a.pixel_step, a.last);
    }
  }
}

// Kernel gradient: adds to R input channels x V vectors of filters of one
// window tap (i, j) the products summed over one image's output pixels, in
// row-major pixel order.
struct BackwardFilterArgs {
  int64_t pixel_step;  // floats between neighbouring windows (stride * c)
  int64_t row_step;    // floats between the windows of neighbouring rows
  int out_height;
  int out_width;
  int filters;
  int64_t grad_row;  // floats per (i, j, c) row of the gradient: filters
                     // padded
  __mmask16 last;
};

template <int V, int R>
void BackwardFilterTile(const BackwardFilterArgs& a, const float* x,
                        const float* dy, float* grad) {
  __m512 acc[R][V];
#pragma GCC unroll 16
  for (int r = 0; r < R; ++r) {
#pragma GCC unroll 16
    for (int v = 0; v < V; ++v) {
      acc[r][v] = _mm512_loadu_ps(grad + r * a.grad_row + v * kLanes);
    }
  }
  const int f_count = a.filters;
  for (int oh = 0; oh < a.out_height; ++oh) {
    const float* xr = x + oh * a.row_step;
    const float* g = dy + int64_t{oh} * a.out_width * f_count;
    for (int ow = 0; ow < a.out_width; ++ow) {
      __m512 b[V];
#pragma GCC unroll 16
      for (int v = 0; v + 1 < V; ++v) b[v] = _mm512_loadu_ps(g + v * kLanes);
      b[V - 1] = _mm512_maskz_loadu_ps(a.last, g + (V - 1) * kLanes);
#pragma GCC unroll 16
      for (int r = 0; r < R; ++r) {
        const __m512 xv = _mm512_set1_ps(xr[r]);
#pragma GCC unroll 16
        for (int v = 0; v < V; ++v) {
          acc[r][v] = _mm512_fmadd_ps(xv, b[v], acc[r][v]);
        }
      }
      xr += a.pixel_step;
      g += f_count;
    }
  }
#pragma GCC unroll 16
  for (int r = 0; r < R; ++r) {
#pragma GCC unroll 16
    for (int v = 0; v < V; ++v) {
      _mm512_storeu_ps(grad + r * a.grad_row + v * kLanes, acc[r][v]);
    }
  }
}

// The kernels as types, so that one dispatcher serves all three.
struct ForwardKernel {
  template <int V, int R>
  static void Run(const ForwardArgs& a, const float* in, float* out) {
    ForwardTile<V, R>(a, in, out);
  }
};
struct BackwardDataKernel {
  template <int V, int R>
  static void Run(const BackwardDataArgs& a, const float* dy, float* dst) {
    BackwardDataTile<V, R>(a, dy, dst);
  }
};
struct BackwardFilterKernel {
  template <int V, int R>
  static void Run(const BackwardFilterArgs& a, const float* x, const float* dy,
                  float* grad) {
    BackwardFilterTile<V, R>(a, x, dy, grad);
  }
};

// Kernel::Run<V, r> for a run-time r in [1, R].
template <typename Kernel, int V, int R, typename... Args>
void RunTileOf(int r, const Args&... args) {
  if constexpr (R > 0) {
    if (r == R) return Kernel::template Run<V, R>(args...);
    RunTileOf<Kernel, V, R - 1>(r, args...);
  }
}

// Kernel::Run<v, r> for a run-time v in [1, kMaxVectors] and r in
// [1, MaxTile(v)].
template <typename Kernel, typename... Args>
void RunTile(int v, int r, const Args&... args) {
  static_assert(kMaxVectors == 4);
  switch (v) {
    case 1:
      return RunTileOf<Kernel, 1, MaxTile(1)>(r, args...);
    case 2:
      return RunTileOf<Kernel, 2, MaxTile(2)>(r, args...);
    case 3:
      return RunTileOf<Kernel, 3, MaxTile(3)>(r, args...);
    default:
      return RunTileOf<Kernel, 4, MaxTile(4)>(r, args...);
  }
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

#if defined(__clang__)
#pragma clang attribute pop
#else
#pragma GCC pop_options
#endif

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
