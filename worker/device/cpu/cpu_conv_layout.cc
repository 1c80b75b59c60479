#include "worker/device/cpu/cpu_conv_layout.h"

#include <algorithm>
#include <cstring>

namespace lockstep {
namespace cpu_ops {
namespace conv_layout {

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

// Image n of x as the kernels read it: x's own, or padded into scratch.
const float* PaddedInput(const WindowGeometry& g, const Padded& p,
                         const float* x, int n, ConvScratch* s) {
  const float* image = x + n * g.input.ImageSize();
  if (p.in_place) return image;
  PadImage(g, p, image, s->image.data());
  return s->image.data();
}

// Offsets of every tap (i, j) of a padded image's window, in (i, j) order:
// (i * cols + j) * channels into the image, and (i * window_width + j) *
// tap_floats into the kernel.
void AllTaps(const WindowGeometry& g, const Padded& p, int64_t tap_floats,
             ConvScratch* s) {
  s->offsets_a.clear();
  s->offsets_b.clear();
  for (int64_t i = 0; i < g.window_height; ++i) {
    for (int64_t j = 0; j < g.window_width; ++j) {
      s->offsets_a.push_back((i * p.cols + j) * g.input.channels);
      s->offsets_b.push_back((i * g.window_width + j) * tap_floats);
    }
  }
}

// The same for the taps of output pixel (oh, ow) inside the (unpadded)
// image: (h * width + w) * channels into it.
void InsideTaps(const WindowGeometry& g, int oh, int ow, int64_t tap_floats,
                ConvScratch* s) {
  s->offsets_a.clear();
  s->offsets_b.clear();
  ForEachInsideTap(g, oh, ow, [&](int i, int j, int64_t h, int64_t w) {
    s->offsets_a.push_back((h * g.input.width + w) * g.input.channels);
    s->offsets_b.push_back((int64_t{i} * g.window_width + j) * tap_floats);
  });
}

// dst[f][ci] = src[ci][f] for a c x filters block, each dst row padded to
// padded_c floats with zeros; in 16 x 16 blocks (with AVX-512 where whole),
// so that neither side strides through memory a float at a time.
void TransposeTap(const float* src, int64_t c, int64_t filters,
                  int64_t padded_c, float* dst) {
  for (int64_t f0 = 0; f0 < filters; f0 += kLanes) {
    const int64_t f1 = std::min(f0 + kLanes, filters);
    for (int64_t c0 = 0; c0 < c; c0 += kLanes) {
      const int64_t c1 = std::min(c0 + kLanes, c);
      if (f1 - f0 == kLanes && c1 - c0 == kLanes) {
        conv_tiles::Transpose16x16(src + c0 * filters + f0, filters,
                                   dst + f0 * padded_c + c0, padded_c);
        continue;
      }
      for (int64_t ci = c0; ci < c1; ++ci) {
        for (int64_t f = f0; f < f1; ++f) {
          dst[f * padded_c + ci] = src[ci * filters + f];
        }
      }
    }
    for (int64_t f = f0; f < f1; ++f) {
      std::fill(dst + f * padded_c + c, dst + (f + 1) * padded_c, 0.0f);
    }
  }
}

void InsidePositions(const WindowGeometry& g, int filters, int i, int j,
                     ConvScratch* s) {
  const int64_t c = g.input.channels;
  s->offsets_a.clear();
  s->offsets_b.clear();
  for (int oh = 0; oh < g.out_height; ++oh) {
    const int64_t h = int64_t{oh} * g.stride_height - g.pad_top + i;
    if (h < 0 || h >= g.input.height) continue;
    for (int ow = 0; ow < g.out_width; ++ow) {
      const int64_t w = int64_t{ow} * g.stride_width - g.pad_left + j;
      if (w < 0 || w >= g.input.width) continue;
      s->offsets_a.push_back((h * g.input.width + w) * c);
      s->offsets_b.push_back((int64_t{oh} * g.out_width + ow) * filters);
    }
  }
}

void PaddedPositions(const WindowGeometry& g, const Padded& p, int filters,
                     ConvScratch* s) {
  const int64_t c = g.input.channels;
  s->offsets_a.clear();
  s->offsets_b.clear();
  for (int64_t oh = 0; oh < g.out_height; ++oh) {
    for (int64_t ow = 0; ow < g.out_width; ++ow) {
      s->offsets_a.push_back(
          (oh * g.stride_height * p.cols + ow * g.stride_width) * c);
      s->offsets_b.push_back((oh * g.out_width + ow) * filters);
    }
  }
}

}  // namespace conv_layout
}  // namespace cpu_ops
}  // namespace lockstep
