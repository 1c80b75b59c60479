// The loops a parameter-server shard spends its time in -- summing pushed
// gradients, checking them for NaN and Inf, widening bf16 and fp16, and the
// optimizers' updates -- compiled once for each x86-64 level the binary may
// meet (generic SSE2, AVX2, AVX-512) and chosen at run time, so one portable
// binary runs each machine's widest vectors.
//
// Every variant computes the same bits: the loops are element-wise (no
// reductions, so no reordering), every file is built with
// -ffp-contract=off (no fused multiply-adds the generic build would not
// make), and sqrt and division are IEEE-exact in every instruction set.
// tests/unit/kernels_test.cc checks each variant against the generic one.
//
// The environment variable LOCKSTEP_KERNELS=generic|avx2|avx512 picks a
// variant (for benchmarks and tests); a variant this CPU cannot run is
// refused with a message and the best one is used.
#ifndef LOCKSTEP_COMMON_KERNELS_KERNELS_H_
#define LOCKSTEP_COMMON_KERNELS_KERNELS_H_

#include <cstddef>
#include <cstdint>
#include <vector>

namespace lockstep {
namespace kernels {

// Wire encodings, in WireDType's order (common/wire/wire_codec.h).
inline constexpr int kF32 = 0;
inline constexpr int kBf16 = 1;
inline constexpr int kF16 = 2;

// Adam's per-call constants, all fp32 as the loop uses them.
struct AdamFactors {
  float beta_1;
  float beta_2;
  float one_minus_beta_1;
  float one_minus_beta_2;
  float alpha;  // lr * sqrt(1 - beta_2^t) / (1 - beta_1^t), from double.
  float epsilon;
  float weight_decay;  // 0 for plain Adam.
  float lr;
};

// One variant's loops. `p` points at `n` encoded little-endian elements
// (any alignment). In the optimizer loops `from` is null for an in-place
// update (the weights are read from `w`); gradient i is scale * sum[i];
// [in_place][decay] index the loops' specializations (decay: weight decay
// is not zero).
struct Table {
  const char* name;
  // sum[i] += element i.
  void (*accumulate[3])(const char* p, size_t n, float* sum);
  // out[i] = element i.
  void (*decode[3])(const char* p, size_t n, float* out);
  // Whether any element is NaN or Inf.
  bool (*any_nonfinite[3])(const char* p, size_t n);
  // out[i] = sum[i] * scale (the mean of a state chunk).
  void (*scale)(size_t n, float scale, const float* sum, float* out);
  void (*sgd[2][2])(size_t n, float lr, float weight_decay, float scale,
                    const float* sum, const float* from, float* w);
  // [in_place][decay][nesterov].
  void (*momentum[2][2][2])(size_t n, float lr, float weight_decay,
                            float momentum, float scale, const float* sum,
                            float* velocity, const float* from, float* w);
  void (*adam[2][2])(size_t n, const AdamFactors& f, float scale,
                     const float* sum, float* m, float* v, const float* from,
                     float* w);
  // STREAM's copy (a[i] = b[i]) and triad (a[i] = b[i] + q * c[i]), for
  // `lockstep_bench server` to measure the machine's memory bandwidth with
  // the same compiler and vectors as the loops above.
  void (*copy)(size_t n, const float* b, float* a);
  void (*triad)(size_t n, float q, const float* b, const float* c, float* a);
};

// The variant in use: LOCKSTEP_KERNELS's, else the widest this CPU runs.
// Chosen once, on first use.
const Table& Active();

// Every variant built into this binary, generic first; only those in
// Runnable() may be called on this CPU.
std::vector<const Table*> Built();
// Every variant built into this binary that this CPU can run, generic
// first.
std::vector<const Table*> Runnable();

}  // namespace kernels
}  // namespace lockstep

#endif  // LOCKSTEP_COMMON_KERNELS_KERNELS_H_
