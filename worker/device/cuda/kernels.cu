#include <climits>
#include <cmath>
#include <cstdint>

#include "worker/device/cuda/kernel_util.cuh"
#include "worker/device/cuda/kernels.h"

namespace lockstep {
namespace cuda_internal {
namespace {

__global__ void AddBiasKernel(int rows, int cols,
                              const float* __restrict__ bias,
                              float* __restrict__ x) {
  const int c = blockIdx.x * blockDim.x + threadIdx.x;
  if (c >= cols) return;
  const float b = bias[c];
  for (int r = blockIdx.y; r < rows; r += gridDim.y) {
    x[static_cast<size_t>(r) * cols + c] += b;
  }
}

// y may be x, and dx may be dy (in place): each element is read before it
// is written, by the same thread, so no __restrict__ here.
__global__ void ReluForwardKernel(size_t n, const float* x, float* y) {
  const size_t stride = static_cast<size_t>(gridDim.x) * blockDim.x;
  for (size_t i = static_cast<size_t>(blockIdx.x) * blockDim.x + threadIdx.x;
       i < n; i += stride) {
    const float v = x[i];
    y[i] = v > 0.0f ? v : 0.0f;
  }
}

__global__ void ReluBackwardKernel(size_t n,
                                   const float* __restrict__ activation,
                                   const float* dy, float* dx) {
  const size_t stride = static_cast<size_t>(gridDim.x) * blockDim.x;
  for (size_t i = static_cast<size_t>(blockIdx.x) * blockDim.x + threadIdx.x;
       i < n; i += stride) {
    const float g = dy[i];
    dx[i] = activation[i] > 0.0f ? g : 0.0f;
  }
}

// One block: finds the first row whose label is outside [0, cols) and
// resets the result.
__global__ void ValidateLabelsKernel(int rows, int cols,
                                     const int32_t* __restrict__ labels,
                                     SoftmaxResult* result) {
  __shared__ int first_bad[kThreads];
  int bad = INT_MAX;
  for (int r = threadIdx.x; r < rows; r += kThreads) {
    if (labels[r] < 0 || labels[r] >= cols) {
      bad = r;  // Rows rise, so the first hit is this thread's lowest.
      break;
    }
  }
  first_bad[threadIdx.x] = bad;
  __syncthreads();
  for (unsigned half = kThreads / 2; half > 0; half /= 2) {
    if (threadIdx.x < half) {
      first_bad[threadIdx.x] =
          min(first_bad[threadIdx.x], first_bad[threadIdx.x + half]);
    }
    __syncthreads();
  }
  if (threadIdx.x == 0) {
    const int row = first_bad[0];
    result->loss_sum = 0.0;
    result->correct = 0;
    result->bad_row = row == INT_MAX ? -1 : row;
    result->bad_label = row == INT_MAX ? 0 : labels[row];
  }
}

// One warp per row. Mirrors the CPU device: the max (lowest index among
// ties) shifts exp() into range, exp is taken in float, the sum in double.
__global__ void SoftmaxRowsKernel(
    int rows, int cols, const float* __restrict__ logits,
    const int32_t* __restrict__ labels, float grad_scale,
    float* __restrict__ grad_logits, double* __restrict__ row_loss,
    int* __restrict__ row_hit, const SoftmaxResult* result) {
  if (result->bad_row >= 0) return;  // A rejected batch writes nothing.
  const int row = (blockIdx.x * blockDim.x + threadIdx.x) / kWarp;
  const int lane = threadIdx.x % kWarp;
  if (row >= rows) return;  // Whole warps leave together.
  const float* z = logits + static_cast<size_t>(row) * cols;

  float max = -INFINITY;
  int arg_max = INT_MAX;
  if (lane < cols) {
    max = z[lane];
    arg_max = lane;
  }
  for (int c = lane + kWarp; c < cols; c += kWarp) {
    if (z[c] > max) {
      max = z[c];
      arg_max = c;
    }
  }
  for (int offset = kWarp / 2; offset > 0; offset /= 2) {
    const float other = __shfl_down_sync(kFullMask, max, offset);
    const int other_arg = __shfl_down_sync(kFullMask, arg_max, offset);
    if (other > max || (other == max && other_arg < arg_max)) {
      max = other;
      arg_max = other_arg;
    }
  }
  max = __shfl_sync(kFullMask, max, 0);
  arg_max = __shfl_sync(kFullMask, arg_max, 0);

  float* g = grad_logits == nullptr
                 ? nullptr
                 : grad_logits + static_cast<size_t>(row) * cols;
  double sum = 0.0;
  for (int c = lane; c < cols; c += kWarp) {
    const float e = expf(z[c] - max);
    if (g != nullptr) g[c] = e;
    sum += e;
  }
  for (int offset = kWarp / 2; offset > 0; offset /= 2) {
    sum += __shfl_down_sync(kFullMask, sum, offset);
  }
  sum = __shfl_sync(kFullMask, sum, 0);

  const int label = labels[row];
  if (g != nullptr) {
    const float scale = static_cast<float>(grad_scale / sum);
    for (int c = lane; c < cols; c += kWarp) {
      g[c] *= scale;
      if (c == label) g[c] -= grad_scale;
    }
  }
  if (lane == 0) {
    row_loss[row] = log(sum) - (static_cast<double>(z[label]) - max);
    row_hit[row] = arg_max == label ? 1 : 0;
  }
}

// One block: adds the rows' losses and hits in a fixed order.
__global__ void SumRowsKernel(int rows, const double* __restrict__ row_loss,
                              const int* __restrict__ row_hit,
                              SoftmaxResult* result) {
  __shared__ double loss[kThreads];
  __shared__ long long hits[kThreads];
  if (result->bad_row >= 0) return;  // Uniform across the block.
  double l = 0.0;
  long long h = 0;
  for (int r = threadIdx.x; r < rows; r += kThreads) {
    l += row_loss[r];
    h += row_hit[r];
  }
  loss[threadIdx.x] = l;
  hits[threadIdx.x] = h;
  __syncthreads();
  for (unsigned half = kThreads / 2; half > 0; half /= 2) {
    if (threadIdx.x < half) {
      loss[threadIdx.x] += loss[threadIdx.x + half];
      hits[threadIdx.x] += hits[threadIdx.x + half];
    }
    __syncthreads();
  }
  if (threadIdx.x == 0) {
    result->loss_sum = loss[0];
    result->correct = hits[0];
  }
}

}  // namespace

cudaError_t LaunchAddBias(int rows, int cols, const float* bias, float* x,
                          cudaStream_t stream) {
  const dim3 grid((cols + kThreads - 1) / kThreads,
                  rows < 65535 ? rows : 65535);
  LOCKSTEP_LAUNCH_INDEPENDENT(AddBiasKernel, grid, kThreads, 0, stream)
  (rows, cols, bias, x);
  return cudaGetLastError();
}

cudaError_t LaunchReluForward(size_t n, const float* x, float* y,
                              cudaStream_t stream) {
  LOCKSTEP_LAUNCH_INDEPENDENT(ReluForwardKernel, GridFor(n), kThreads, 0,
                              stream)
  (n, x, y);
  return cudaGetLastError();
}

cudaError_t LaunchReluBackward(size_t n, const float* activation,
                               const float* dy, float* dx,
                               cudaStream_t stream) {
  LOCKSTEP_LAUNCH_INDEPENDENT(ReluBackwardKernel, GridFor(n), kThreads, 0,
                              stream)
  (n, activation, dy, dx);
  return cudaGetLastError();
}

cudaError_t LaunchSoftmaxCrossEntropy(int rows, int cols, const float* logits,
                                      const int32_t* labels, float grad_scale,
                                      float* grad_logits, double* row_loss,
                                      int* row_hit, SoftmaxResult* result,
                                      cudaStream_t stream) {
  LOCKSTEP_LAUNCH(ValidateLabelsKernel, 1, kThreads, 0, stream)
  (rows, cols, labels, result);
  if (cudaError_t e = cudaGetLastError(); e != cudaSuccess) return e;
  constexpr int kRowsPerBlock = kThreads / kWarp;
  const unsigned grid = (rows + kRowsPerBlock - 1) / kRowsPerBlock;
  LOCKSTEP_LAUNCH(SoftmaxRowsKernel, grid, kThreads, 0, stream)
  (rows, cols, logits, labels, grad_scale, grad_logits, row_loss, row_hit,
   result);
  if (cudaError_t e = cudaGetLastError(); e != cudaSuccess) return e;
  LOCKSTEP_LAUNCH(SumRowsKernel, 1, kThreads, 0, stream)
  (rows, row_loss, row_hit, result);
  return cudaGetLastError();
}

}  // namespace cuda_internal
}  // namespace lockstep
