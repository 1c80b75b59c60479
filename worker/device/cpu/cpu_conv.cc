#include "worker/device/cpu/cpu_conv.h"

#include <immintrin.h>

#include <algorithm>
#include <cstdint>
#include <cstring>

#include "absl/strings/str_format.h"
#include "common/base/status_macros.h"
#include "worker/device/cpu/cpu_conv_layout.h"
#include "worker/device/cpu/cpu_conv_tiles.h"
#include "worker/device/device_checks.h"

namespace lockstep {
namespace cpu_ops {
namespace {

using conv_layout::AllTaps;
using conv_layout::BatchTiles;
using conv_layout::ForEachInsideTap;
using conv_layout::ForEachTile;
using conv_layout::ForEachVectorBlock;
using conv_layout::InsidePositions;
using conv_layout::InsideTaps;
using conv_layout::Padded;
using conv_layout::PaddedFor;
using conv_layout::PaddedInput;
using conv_layout::PaddedPositions;
using conv_layout::RoundUpToLanes;
using conv_layout::TransposeTap;
using conv_layout::UnpadImage;
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

// The whole passes, over blocks of up to kMaxVectors vectors of output
// channels (forward, kernel gradient) or input channels (input gradient).
// Each pass has two ways through: batch tiles (a tile runs over the batch
// at one output pixel, with only the taps inside the image) and image tiles
// (a tile runs along an output row of one padded image).

// The forward pass with batch tiles; `a` has the channels and kernel set.
void ForwardBatchTiles(const WindowGeometry& g, int filters, const float* x,
                       const float* kernel, float* y, int64_t tap_floats,
                       ForwardArgs a, ConvScratch* s) {
  const int64_t out_image = int64_t{g.out_height} * g.out_width * filters;
  a.pixel_step = g.input.ImageSize();
  a.out_pixel = out_image;
  for (int oh = 0; oh < g.out_height; ++oh) {
    for (int ow = 0; ow < g.out_width; ++ow) {
      InsideTaps(g, oh, ow, tap_floats, s);
      a.taps = static_cast<int>(s->offsets_a.size());
      a.x_taps = s->offsets_a.data();
      a.w_taps = s->offsets_b.data();
      float* out = y + (int64_t{oh} * g.out_width + ow) * filters;
      ForEachVectorBlock(filters, [&](int64_t v0, int v, __mmask16 last) {
        a.kernel = kernel + v0 * kLanes;
        a.last = last;
        ForEachTile(g.input.batch, MaxTile(v), [&](int64_t n, int r) {
          RunTile<ForwardKernel>(v, r, a, x + n * a.pixel_step,
                                 out + n * out_image + v0 * kLanes);
        });
      });
    }
  }
}

// The forward pass with image tiles.
void ForwardImageTiles(const WindowGeometry& g, int filters, const float* x,
                       const float* kernel, float* y, int64_t tap_floats,
                       ForwardArgs a, ConvScratch* s) {
  const int64_t c = g.input.channels;
  const int64_t out_image = int64_t{g.out_height} * g.out_width * filters;
  const Padded p = PaddedFor(g);
  if (!p.in_place) s->image.resize(p.Size(c));
  AllTaps(g, p, tap_floats, s);
  a.taps = static_cast<int>(s->offsets_a.size());
  a.x_taps = s->offsets_a.data();
  a.w_taps = s->offsets_b.data();
  a.pixel_step = g.stride_width * c;
  a.out_pixel = filters;
  const int64_t row_step = p.cols * c;
  for (int n = 0; n < g.input.batch; ++n) {
    const float* image = PaddedInput(g, p, x, n, s);
    float* out_image_ptr = y + n * out_image;
    ForEachVectorBlock(filters, [&](int64_t v0, int v, __mmask16 last) {
      a.kernel = kernel + v0 * kLanes;
      a.last = last;
      for (int oh = 0; oh < g.out_height; ++oh) {
        const float* in_row = image + int64_t{oh} * g.stride_height * row_step;
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
  const int64_t tap_floats = c * padded_filters;
  ForwardArgs a;
  a.channels = static_cast<int>(c);
  a.kernel_row = padded_filters;
  if (BatchTiles(g)) {
    ForwardBatchTiles(g, filters, x, kernel, y, tap_floats, a, s);
  } else {
    ForwardImageTiles(g, filters, x, kernel, y, tap_floats, a, s);
  }
}

// The kernel into s->kernel, transposed to [i][j][f][c] with the channels
// padded to whole vectors; `tap_floats` = filters x padded channels.
void TransposeKernel(const WindowGeometry& g, int filters, const float* kernel,
                     int64_t tap_floats, ConvScratch* s) {
  const int64_t c = g.input.channels;
  const int64_t padded_c = RoundUpToLanes(c);
  const int64_t area = int64_t{g.window_height} * g.window_width;
  // The kernel transposed to [i][j][f][c], channels padded with zeros: the
  // taps that some window has inside the image only (batch tiles skip the
  // others; a 3x3 window on a 1x1 map uses 1 of its 9).
  std::vector<char>& used = s->used_taps;
  used.assign(area, !BatchTiles(g));
  if (BatchTiles(g)) {
    for (int oh = 0; oh < g.out_height; ++oh) {
      for (int ow = 0; ow < g.out_width; ++ow) {
        ForEachInsideTap(g, oh, ow, [&](int i, int j, int64_t, int64_t) {
          used[int64_t{i} * g.window_width + j] = 1;
        });
      }
    }
  }
  s->kernel.resize(area * tap_floats);
  for (int64_t t = 0; t < area; ++t) {
    if (used[t]) {
      TransposeTap(kernel + t * c * filters, c, filters, padded_c,
                   &s->kernel[t * tap_floats]);
    }
  }
}

// The input gradient with batch tiles, which add into dx itself: only taps
// inside the image.
void BackwardDataBatchTiles(const WindowGeometry& g, int filters,
                            const float* dy, float* dx, int64_t tap_floats,
                            BackwardDataArgs a, ConvScratch* s) {
  const int64_t c = g.input.channels;
  const int64_t out_image = int64_t{g.out_height} * g.out_width * filters;
  std::memset(dx, 0, sizeof(float) * g.input.Size());
  a.pixel_step = g.input.ImageSize();
  a.dy_step = out_image;
  for (int oh = 0; oh < g.out_height; ++oh) {
    for (int ow = 0; ow < g.out_width; ++ow) {
      InsideTaps(g, oh, ow, tap_floats, s);
      a.taps = static_cast<int>(s->offsets_a.size());
      a.d_taps = s->offsets_a.data();
      a.k_taps = s->offsets_b.data();
      const float* g_pixel = dy + (int64_t{oh} * g.out_width + ow) * filters;
      ForEachVectorBlock(c, [&](int64_t v0, int v, __mmask16 last) {
        a.kernel_t = s->kernel.data() + v0 * kLanes;
        a.last = last;
        ForEachTile(g.input.batch, MaxTile(v), [&](int64_t n, int r) {
          RunTile<BackwardDataKernel>(v, r, a, g_pixel + n * out_image,
                                      dx + n * a.pixel_step + v0 * kLanes);
        });
      });
    }
  }
}

// The input gradient with image tiles, into a padded image per example.
void BackwardDataImageTiles(const WindowGeometry& g, int filters,
                            const float* dy, float* dx, int64_t tap_floats,
                            BackwardDataArgs a, ConvScratch* s) {
  const int64_t c = g.input.channels;
  const int64_t out_image = int64_t{g.out_height} * g.out_width * filters;
  const Padded p = PaddedFor(g);
  if (!p.in_place) s->image.resize(p.Size(c));
  AllTaps(g, p, tap_floats, s);
  a.taps = static_cast<int>(s->offsets_a.size());
  a.d_taps = s->offsets_a.data();
  a.k_taps = s->offsets_b.data();
  a.pixel_step = g.stride_width * c;
  a.dy_step = filters;
  const int64_t row_step = p.cols * c;
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
            padded + int64_t{oh} * g.stride_height * row_step + v0 * kLanes;
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

void BackwardData(const WindowGeometry& g, int filters, const float* dy,
                  const float* kernel, float* dx, ConvScratch* s) {
  const int64_t padded_c = RoundUpToLanes(g.input.channels);
  const int64_t tap_floats = filters * padded_c;
  TransposeKernel(g, filters, kernel, tap_floats, s);
  BackwardDataArgs a;
  a.filters = filters;
  a.kernel_t_row = padded_c;
  if (BatchTiles(g)) {
    BackwardDataBatchTiles(g, filters, dy, dx, tap_floats, a, s);
  } else {
    BackwardDataImageTiles(g, filters, dy, dx, tap_floats, a, s);
  }
}

// Where the kernel gradient's sums go: straight to kernel_grad (zeroed) when
// its rows fill whole vectors, else to rows padded with zeros in scratch.
float* GradientSums(float* kernel_grad, int64_t taps, int filters,
                    int64_t padded_filters, ConvScratch* s) {
  if (padded_filters == filters) {
    std::memset(kernel_grad, 0, sizeof(float) * taps * filters);
    return kernel_grad;
  }
  s->kernel_grad.assign(taps * padded_filters, 0.0f);
  return s->kernel_grad.data();
}

// dst's `rows` rows of `filters` from src's rows of padded_filters.
void UnpadRows(const float* src, int64_t rows, int filters,
               int64_t padded_filters, float* dst) {
  for (int64_t t = 0; t < rows; ++t) {
    std::memcpy(dst + t * filters, src + t * padded_filters,
                sizeof(float) * filters);
  }
}

void BackwardFilter(const WindowGeometry& g, int filters, const float* x,
                    const float* dy, float* kernel_grad, ConvScratch* s) {
  const int64_t c = g.input.channels;
  const int64_t taps = int64_t{g.window_height} * g.window_width * c;
  const int64_t padded_filters = RoundUpToLanes(filters);
  float* sums = GradientSums(kernel_grad, taps, filters, padded_filters, s);
  const int64_t out_image = int64_t{g.out_height} * g.out_width * filters;
  BackwardFilterArgs a;
  a.grad_row = padded_filters;
  // Sums one tap's gradient over a.reps images of `image` from x, x being
  // at the tap's first channel (image tiles: in the padded image).
  auto tap = [&](int i, int j, const float* x_tap, const float* dy_image) {
    float* grad =
        sums + ((int64_t{i} * g.window_width + j) * c) * padded_filters;
    ForEachVectorBlock(filters, [&](int64_t v0, int v, __mmask16 last) {
      a.last = last;
      ForEachTile(c, MaxTile(v), [&](int64_t c0, int r) {
        RunTile<BackwardFilterKernel>(v, r, a, x_tap + c0,
                                      dy_image + v0 * kLanes,
                                      grad + c0 * padded_filters + v0 * kLanes);
      });
    });
  };
  if (BatchTiles(g)) {
    a.reps = g.input.batch;
    a.x_rep_step = g.input.ImageSize();
    a.dy_rep_step = out_image;
    for (int i = 0; i < g.window_height; ++i) {
      for (int j = 0; j < g.window_width; ++j) {
        InsidePositions(g, filters, i, j, s);
        if (s->offsets_a.empty()) continue;  // Its gradient stays zero.
        a.positions = static_cast<int>(s->offsets_a.size());
        a.x_pos = s->offsets_a.data();
        a.dy_pos = s->offsets_b.data();
        tap(i, j, x, dy);
      }
    }
  } else {
    const Padded p = PaddedFor(g);
    if (!p.in_place) s->image.resize(p.Size(c));
    PaddedPositions(g, p, filters, s);
    a.positions = static_cast<int>(s->offsets_a.size());
    a.x_pos = s->offsets_a.data();
    a.dy_pos = s->offsets_b.data();
    a.reps = 1;
    a.x_rep_step = a.dy_rep_step = 0;
    for (int n = 0; n < g.input.batch; ++n) {
      const float* image = PaddedInput(g, p, x, n, s);
      for (int i = 0; i < g.window_height; ++i) {
        for (int j = 0; j < g.window_width; ++j) {
          tap(i, j, image + (i * p.cols + j) * c, dy + n * out_image);
        }
      }
    }
  }
  if (sums != kernel_grad) {
    UnpadRows(sums, taps, filters, padded_filters, kernel_grad);
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
