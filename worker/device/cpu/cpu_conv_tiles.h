// The tiles of the CPU device's direct convolutions (cpu_conv.cc and
// cpu_conv_layout.cc, the only files that include this): AVX-512 kernels that
// each hold a tile of outputs, R pixels (or input channels) x V vectors of 16
// floats, in registers, and RunTile, which picks the kernel instance for a
// tile's run-time size. The tile templates must stay fully unrolled (the
// pragmas) for the compiler to keep a tile in registers.
#ifndef LOCKSTEP_WORKER_DEVICE_CPU_CPU_CONV_TILES_H_
#define LOCKSTEP_WORKER_DEVICE_CPU_CPU_CONV_TILES_H_

#include <immintrin.h>

#include <cstdint>

namespace lockstep {
namespace cpu_ops {
namespace conv_tiles {

inline constexpr int kLanes = 16;  // floats in an AVX-512 vector

// Vectors of outputs a tile holds (V) and the most pixels (or input
// channels) it spans (R): R * V accumulators, at most 24 of the 32
// registers, the rest for the vectors being multiplied.
inline constexpr int kMaxVectors = 4;
constexpr int MaxTile(int vectors) {
  return vectors == 1 ? 16 : vectors == 2 ? 12 : vectors == 3 ? 8 : 6;
}

// Compiled for AVX-512F alone; cpu_conv.cc calls them only when
// DirectConvAvailable().
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

// A tile's rows are R output pixels of one row of one image ("image
// tiles", for wide maps) or one output pixel of R images ("batch tiles",
// for narrow ones); either way they lie a fixed step apart in every tensor.
// The window taps a tile sums over come as a list of offsets, so a batch
// tile skips the taps that lie in the padding for its pixel.

// Forward: a tile of R output rows x V vectors of filters.
struct ForwardArgs {
  int64_t pixel_step;     // floats between the tile's rows in the input
  int taps;               // window taps to sum over
  const int64_t* x_taps;  // each tap's first float, from the tile's input
  const int64_t* w_taps;  // each tap's first kernel row, from `kernel`
  int channels;
  const float* kernel;  // at this tile's first filter
  int64_t kernel_row;   // floats per (i, j, c) row of the kernel
  int64_t out_pixel;    // floats between the tile's rows in the output
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
  for (int t = 0; t < a.taps; ++t) {
    const float* x = in + a.x_taps[t];
    const float* w = a.kernel + a.w_taps[t];
    for (int c = 0; c < c_count; ++c) {
      RankOneUpdate(acc, x + c, a.pixel_step, w);
      w += a.kernel_row;
    }
  }
  StoreTile(acc, out, a.out_pixel, a.last);
}

// Input gradient: adds each tap's contribution of R output rows to V
// vectors of input channels of `dst` (the gradient image, padded for image
// tiles), tap by tap in the list's order.
struct BackwardDataArgs {
  int64_t pixel_step;     // floats between the tile's rows in dst
  int64_t dy_step;        // floats between the tile's rows in dy
  int taps;               // window taps
  const int64_t* d_taps;  // each tap's first float, from the tile's dst
  const int64_t* k_taps;  // each tap's first row of kernel_t
  int filters;            // of dy
  const float* kernel_t;  // [i][j][f][c padded], at this tile's channel
  int64_t kernel_t_row;   // floats per (i, j, f) row: channels padded
  __mmask16 last;
};

template <int V, int R>
void BackwardDataTile(const BackwardDataArgs& a, const float* dy, float* dst) {
  const int f_count = a.filters;
  for (int t = 0; t < a.taps; ++t) {
    float* d = dst + a.d_taps[t];
    const float* w = a.kernel_t + a.k_taps[t];
    __m512 acc[R][V];
    LoadTile(acc, d, a.pixel_step, a.last);
    for (int f = 0; f < f_count; ++f) {
      RankOneUpdate(acc, dy + f, a.dy_step, w);
      w += a.kernel_t_row;
    }
    StoreTile(acc, d, a.pixel_step, a.last);
  }
}

// Kernel gradient: adds to R input channels x V vectors of filters of one
// window tap the products over `reps` x `positions` output pixels: for
// each rep (image) in turn, the positions in the list's order.
struct BackwardFilterArgs {
  int positions;          // output pixels per rep
  const int64_t* x_pos;   // each one's first input float, from x
  const int64_t* dy_pos;  // each one's first dy float, from dy
  int64_t reps;           // images
  int64_t x_rep_step;     // floats between reps in x
  int64_t dy_rep_step;    // floats between reps in dy
  int64_t grad_row;       // floats per (i, j, c) row of the gradient:
                          // filters padded
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
  for (int64_t rep = 0; rep < a.reps; ++rep) {
    const float* x_rep = x + rep * a.x_rep_step;
    const float* dy_rep = dy + rep * a.dy_rep_step;
    for (int p = 0; p < a.positions; ++p) {
      const float* xr = x_rep + a.x_pos[p];
      const float* g = dy_rep + a.dy_pos[p];
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

// The shuffles Transpose16x16 needs, as the masked forms with every lane
// selected: GCC 12.2's unmasked ones pass an undefined vector along and
// warn that it is used uninitialized (GCC bug 105593).
inline __m512 UnpackLo32(__m512 a, __m512 b) {
  return _mm512_mask_unpacklo_ps(a, 0xFFFF, a, b);
}
inline __m512 UnpackHi32(__m512 a, __m512 b) {
  return _mm512_mask_unpackhi_ps(a, 0xFFFF, a, b);
}
inline __m512 UnpackLo64(__m512 a, __m512 b) {
  const __m512d x = _mm512_castps_pd(a), y = _mm512_castps_pd(b);
  return _mm512_castpd_ps(_mm512_mask_unpacklo_pd(x, 0xFF, x, y));
}
inline __m512 UnpackHi64(__m512 a, __m512 b) {
  const __m512d x = _mm512_castps_pd(a), y = _mm512_castps_pd(b);
  return _mm512_castpd_ps(_mm512_mask_unpackhi_pd(x, 0xFF, x, y));
}
// 128-bit lanes 0 and 2 (kEven) or 1 and 3 (kOdd) of a, then of b.
constexpr int kEvenLanes = 0x88;
constexpr int kOddLanes = 0xDD;
template <int kLanesOf>
inline __m512 Lanes128(__m512 a, __m512 b) {
  return _mm512_mask_shuffle_f32x4(a, 0xFFFF, a, b, kLanesOf);
}

// dst row j, float i = src row i, float j, for a 16 x 16 block whose rows
// lie src_step and dst_step floats apart: interleaving pairs, then pairs of
// pairs, then 128-bit lanes twice.
inline void Transpose16x16(const float* src, int64_t src_step, float* dst,
                           int64_t dst_step) {
  __m512 r[16], t[16];
#pragma GCC unroll 16
  for (int i = 0; i < 16; ++i) r[i] = _mm512_loadu_ps(src + i * src_step);
    // Rows 2k, 2k+1 (a, b): a0 b0 a1 b1 | a4 b4 a5 b5 | ... and a2 b2 a3 b3 ...
#pragma GCC unroll 8
  for (int k = 0; k < 8; ++k) {
    t[2 * k] = UnpackLo32(r[2 * k], r[2 * k + 1]);
    t[2 * k + 1] = UnpackHi32(r[2 * k], r[2 * k + 1]);
  }
  // Rows 4k .. 4k+3: r[4k + m] holds their columns m, m+4, m+8, m+12, one
  // per 128-bit lane.
#pragma GCC unroll 4
  for (int k = 0; k < 4; ++k) {
    r[4 * k] = UnpackLo64(t[4 * k], t[4 * k + 2]);
    r[4 * k + 1] = UnpackHi64(t[4 * k], t[4 * k + 2]);
    r[4 * k + 2] = UnpackLo64(t[4 * k + 1], t[4 * k + 3]);
    r[4 * k + 3] = UnpackHi64(t[4 * k + 1], t[4 * k + 3]);
  }
  // Lanes: t[m] = groups 0, 1 of columns m and m+8; t[4+m] of m+4, m+12;
  // t[8+m] and t[12+m] the same for groups 2 and 3.
#pragma GCC unroll 4
  for (int m = 0; m < 4; ++m) {
    t[m] = Lanes128<kEvenLanes>(r[m], r[4 + m]);
    t[4 + m] = Lanes128<kOddLanes>(r[m], r[4 + m]);
    t[8 + m] = Lanes128<kEvenLanes>(r[8 + m], r[12 + m]);
    t[12 + m] = Lanes128<kOddLanes>(r[8 + m], r[12 + m]);
  }
#pragma GCC unroll 4
  for (int m = 0; m < 4; ++m) {
    _mm512_storeu_ps(dst + m * dst_step, Lanes128<kEvenLanes>(t[m], t[8 + m]));
    _mm512_storeu_ps(dst + (m + 8) * dst_step,
                     Lanes128<kOddLanes>(t[m], t[8 + m]));
    _mm512_storeu_ps(dst + (m + 4) * dst_step,
                     Lanes128<kEvenLanes>(t[4 + m], t[12 + m]));
    _mm512_storeu_ps(dst + (m + 12) * dst_step,
                     Lanes128<kOddLanes>(t[4 + m], t[12 + m]));
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

#undef LOCKSTEP_TILE_INLINE

#if defined(__clang__)
#pragma clang attribute pop
#else
#pragma GCC pop_options
#endif

}  // namespace conv_tiles
}  // namespace cpu_ops
}  // namespace lockstep

#endif  // LOCKSTEP_WORKER_DEVICE_CPU_CPU_CONV_TILES_H_
