// How the CPU device's direct convolutions (cpu_conv.cc) lay their work
// out: the padded image a pass reads, the tiles and vector blocks it splits
// its outputs into, the window taps each tile sums over, and the kernel
// transposed for the input gradient. Internal to cpu_conv.cc.
#ifndef LOCKSTEP_WORKER_DEVICE_CPU_CPU_CONV_LAYOUT_H_
#define LOCKSTEP_WORKER_DEVICE_CPU_CPU_CONV_LAYOUT_H_

#include <immintrin.h>

#include <algorithm>
#include <cstdint>

#include "worker/device/cpu/cpu_conv.h"
#include "worker/device/cpu/cpu_conv_tiles.h"
#include "worker/device/image_geometry.h"

namespace lockstep {
namespace cpu_ops {
namespace conv_layout {

using conv_tiles::kLanes;
using conv_tiles::kMaxVectors;

inline int64_t RoundUpToLanes(int64_t n) {
  return (n + kLanes - 1) / kLanes * kLanes;
}

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

Padded PaddedFor(const WindowGeometry& g);

// Copies image `x` (one of window.input's) into `xp`, zeros around it.
void PadImage(const WindowGeometry& g, const Padded& p, const float* x,
              float* xp);

// The inverse direction for gradients: dx = the part of `dxp` that PadImage
// would fill from x; input pixels no window reads get zero.
void UnpadImage(const WindowGeometry& g, const Padded& p, const float* dxp,
                float* dx);

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
inline __mmask16 TailMask(int64_t count) {
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
                         const float* x, int n, ConvScratch* s);

// Narrow output maps (ResNet-50's 2x2 and 1x1 at 32x32 input) get batch
// tiles: one output pixel of up to 16 images, whose windows all have the
// same taps inside the image, so the taps in the padding are skipped (8 of
// the 9 of a 3x3 window on a 1x1 map) and every kernel vector loaded
// serves a whole tile. Wider maps get image tiles: up to 16 pixels of one
// row of one zero-padded image.
inline constexpr int kImageTilesFromWidth = 4;

inline bool BatchTiles(const WindowGeometry& g) {
  return g.out_width < kImageTilesFromWidth;
}

// Calls visit(i, j, h, w) for the taps (i, j) of output pixel (oh, ow)'s
// window that lie inside the image, at its pixel (h, w), in (i, j) order.
// In 64 bits: a caller may pass any output size, and oh * stride must not
// wrap around into the image.
template <typename Visit>
void ForEachInsideTap(const WindowGeometry& g, int oh, int ow, Visit visit) {
  for (int i = 0; i < g.window_height; ++i) {
    const int64_t h = int64_t{oh} * g.stride_height - g.pad_top + i;
    if (h < 0 || h >= g.input.height) continue;
    for (int j = 0; j < g.window_width; ++j) {
      const int64_t w = int64_t{ow} * g.stride_width - g.pad_left + j;
      if (w < 0 || w >= g.input.width) continue;
      visit(i, j, h, w);
    }
  }
}

// Offsets of every tap (i, j) of a padded image's window, in (i, j) order:
// (i * cols + j) * channels into the image, and (i * window_width + j) *
// tap_floats into the kernel.
void AllTaps(const WindowGeometry& g, const Padded& p, int64_t tap_floats,
             ConvScratch* s);

// The same for the taps of output pixel (oh, ow) inside the (unpadded)
// image: (h * width + w) * channels into it.
void InsideTaps(const WindowGeometry& g, int oh, int ow, int64_t tap_floats,
                ConvScratch* s);

// The kernel gradient's positions, into s->offsets_a (x) and s->offsets_b
// (dy, of `filters` channels). Batch tiles: those of every output pixel
// whose window has tap (i, j) inside the image. Image tiles: those of every
// output pixel from the padded image's corner, the same for every tap.
void InsidePositions(const WindowGeometry& g, int filters, int i, int j,
                     ConvScratch* s);
void PaddedPositions(const WindowGeometry& g, const Padded& p, int filters,
                     ConvScratch* s);

// dst[f][ci] = src[ci][f] for a c x filters block, each dst row padded to
// padded_c floats with zeros; in 16 x 16 blocks (with AVX-512 where whole),
// so that neither side strides through memory a float at a time.
void TransposeTap(const float* src, int64_t c, int64_t filters,
                  int64_t padded_c, float* dst);

}  // namespace conv_layout
}  // namespace cpu_ops
}  // namespace lockstep

#endif  // LOCKSTEP_WORKER_DEVICE_CPU_CPU_CONV_LAYOUT_H_
