// Launch helpers shared by the CUDA device's kernel files: the block size,
// the warp, a grid for n elements, ForEach, which runs a functor at every
// index of [0, n) in a grid-stride loop, and LOCKSTEP_LAUNCH.
//
// The kernel files are compiled by nvcc for the GPU and, for the tests, as
// plain C++ against an emulation of the CUDA runtime
// (tests/cuda_emulation/cuda_runtime_api.h, LOCKSTEP_CUDA_EMULATION): every
// launch goes through LOCKSTEP_LAUNCH, which is <<<...>>> under nvcc.
#ifndef LOCKSTEP_WORKER_CUDA_KERNEL_UTIL_CUH_
#define LOCKSTEP_WORKER_CUDA_KERNEL_UTIL_CUH_

#include <cuda_runtime_api.h>

// LOCKSTEP_LAUNCH(kernel, grid, block, shared_bytes, stream)(arguments...)
// LOCKSTEP_LAUNCH_INDEPENDENT: the same, for a kernel whose threads never
// synchronize (no __syncthreads, no warp shuffles), which the emulation
// runs one thread after another; on a GPU the two are the same launch.
#if defined(LOCKSTEP_CUDA_EMULATION)
#define LOCKSTEP_LAUNCH(kernel, grid, block, shared_bytes, stream) \
  ::lockstep::cuda_emulation::MakeLauncher(                        \
      false, #kernel, grid, block, stream,                         \
      [](auto... args) { kernel(args...); })
#define LOCKSTEP_LAUNCH_INDEPENDENT(kernel, grid, block, shared_bytes, stream) \
  ::lockstep::cuda_emulation::MakeLauncher(                                    \
      true, #kernel, grid, block, stream,                                      \
      [](auto... args) { kernel(args...); })
#else
#define LOCKSTEP_LAUNCH(kernel, grid, block, shared_bytes, stream) \
  kernel<<<grid, block, shared_bytes, stream>>>
#define LOCKSTEP_LAUNCH_INDEPENDENT(kernel, grid, block, shared_bytes, stream) \
  kernel<<<grid, block, shared_bytes, stream>>>
#endif

#include <climits>
#include <cstdint>

namespace lockstep {
namespace cuda_internal {

inline constexpr int kThreads = 256;
inline constexpr int kWarp = 32;
inline constexpr unsigned kFullMask = 0xffffffffu;

// Enough blocks to cover n elements, capped; the kernels stride over the
// rest.
inline unsigned GridFor(int64_t n) {
  const int64_t blocks = (n + kThreads - 1) / kThreads;
  return static_cast<unsigned>(blocks < (1 << 20) ? blocks : (1 << 20));
}

// op(i) for every i in [0, n), i converted to Index for op's arithmetic.
template <typename Index, typename Op>
__global__ void ForEachKernel(int64_t n, Op op) {
  const int64_t stride = static_cast<int64_t>(gridDim.x) * blockDim.x;
  for (int64_t i = static_cast<int64_t>(blockIdx.x) * blockDim.x + threadIdx.x;
       i < n; i += stride) {
    op(static_cast<Index>(i));
  }
}

// Runs op over [0, n) with 32-bit index arithmetic when every buffer of the
// call (the largest has `largest` elements) is indexable by int32.
template <typename Op>
cudaError_t ForEach(int64_t n, int64_t largest, const Op& op,
                    cudaStream_t stream) {
  if (largest <= INT_MAX) {
    LOCKSTEP_LAUNCH_INDEPENDENT(ForEachKernel<int32_t>, GridFor(n), kThreads, 0,
                                stream)
    (n, op);
  } else {
    LOCKSTEP_LAUNCH_INDEPENDENT(ForEachKernel<int64_t>, GridFor(n), kThreads, 0,
                                stream)
    (n, op);
  }
  return cudaGetLastError();
}

}  // namespace cuda_internal
}  // namespace lockstep

#endif  // LOCKSTEP_WORKER_CUDA_KERNEL_UTIL_CUH_
