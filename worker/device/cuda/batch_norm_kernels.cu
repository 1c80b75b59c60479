#include "worker/device/cuda/batch_norm_kernels.h"
#include "worker/device/cuda/kernel_util.cuh"

namespace lockstep {
namespace cuda_internal {
namespace {

using elements::BatchNormGradChannel;

// ---- Batch normalization ----
//
// Per-channel sums in two steps, both in a fixed order: blocks of 32
// channels x 8 threads sum a tile of rows each (coalesced: a warp reads 32
// adjacent channels of one row) into partial[k][tile][channel]; then one
// thread per channel adds its tiles in order.

constexpr int kStatThreadsPerChannel = 8;
constexpr int kMinTileRows = 256;
constexpr int kMaxTiles = 1024;

int TileRows(int rows) {
  const auto spread =
      static_cast<int>((int64_t{rows} + kMaxTiles - 1) / kMaxTiles);
  return spread > kMinTileRows ? spread : kMinTileRows;
}
int Tiles(int rows) { return (rows + TileRows(rows) - 1) / TileRows(rows); }

// Where the pieces of the scratch lie: partial sums (two per channel and
// tile), the sums of x, the backward pass's per-channel numbers, and a
// per-channel scale.
struct BatchNormScratch {
  double* partial;
  double* sums;
  BatchNormGradChannel* grad;
  float* scale;
};
BatchNormScratch Layout(void* scratch, int rows, int channels) {
  BatchNormScratch s;
  s.partial = static_cast<double*>(scratch);
  s.sums = s.partial + 2 * int64_t{Tiles(rows)} * channels;
  s.grad = reinterpret_cast<BatchNormGradChannel*>(s.sums + channels);
  s.scale = reinterpret_cast<float*>(s.grad + channels);
  return s;
}

// Adds Term's K values for (row, channel) over a tile of rows; see above.
template <int K, typename Term>
__global__ void ChannelPartialsKernel(int rows, int channels, int tile_rows,
                                      Term term, double* partial) {
  __shared__ double part[K][kStatThreadsPerChannel][kWarp];
  const int c = blockIdx.x * kWarp + threadIdx.x;
  const int begin = blockIdx.y * tile_rows;  // < rows.
  const int end = tile_rows < rows - begin ? begin + tile_rows : rows;
  double sum[K];
  for (int k = 0; k < K; ++k) sum[k] = 0.0;
  if (c < channels) {
    for (int r = begin + threadIdx.y; r < end; r += kStatThreadsPerChannel) {
      term(static_cast<int64_t>(r) * channels + c, c, sum);
    }
  }
  for (int k = 0; k < K; ++k) part[k][threadIdx.y][threadIdx.x] = sum[k];
  __syncthreads();
  if (threadIdx.y != 0 || c >= channels) return;
  for (int k = 0; k < K; ++k) {
    double total = 0.0;
    for (int i = 0; i < kStatThreadsPerChannel; ++i) {
      total += part[k][i][threadIdx.x];
    }
    partial[(int64_t{k} * gridDim.y + blockIdx.y) * channels + c] = total;
  }
}

template <int K, typename Term>
cudaError_t ChannelPartials(int rows, int channels, const Term& term,
                            double* partial, cudaStream_t stream) {
  const dim3 grid((channels + kWarp - 1) / kWarp, Tiles(rows));
  const dim3 block(kWarp, kStatThreadsPerChannel);
  LOCKSTEP_LAUNCH(ChannelPartialsKernel<K>, grid, block, 0, stream)
  (rows, channels, TileRows(rows), term, partial);
  return cudaGetLastError();
}

// The channel kernels below run one warp per channel (up to 1024 tiles to
// add): lane l adds tiles l, l + 32, ... in order, then the lanes combine in
// a fixed tree, so the total is the same on every run. Every lane gets it.
__device__ double TileTotal(const double* partial, int k, int tiles,
                            int channels, int c, int lane) {
  double total = 0.0;
  for (int t = lane; t < tiles; t += kWarp) {
    total += partial[(int64_t{k} * tiles + t) * channels + c];
  }
  for (int offset = kWarp / 2; offset > 0; offset /= 2) {
    total += __shfl_down_sync(kFullMask, total, offset);
  }
  return __shfl_sync(kFullMask, total, 0);
}

// The channel of the calling warp (whole warps share one, so they leave
// together when it is past the last) and the thread's lane.
__device__ int WarpChannel() {
  return static_cast<int>(
      (static_cast<int64_t>(blockIdx.x) * blockDim.x + threadIdx.x) / kWarp);
}
__device__ int Lane() { return threadIdx.x % kWarp; }

struct SumTerm {
  const float* x;
  __device__ void operator()(int64_t at, int, double* sum) const {
    sum[0] += x[at];
  }
};

// (x - mean)^2 with the float mean, in double, as the CPU device does.
struct CenteredTerm {
  const float* x;
  const float* mean;
  __device__ void operator()(int64_t at, int c, double* sum) const {
    const double d = static_cast<double>(x[at]) - mean[c];
    sum[0] += d * d;
  }
};

// dy and dy * xhat.
struct GradTerm {
  const float* x;
  const float* dy;
  const float* mean;
  const float* inv_std;
  __device__ void operator()(int64_t at, int c, double* sum) const {
    const float xhat = elements::BatchNormXhat(x[at], mean[c], inv_std[c]);
    sum[0] += dy[at];
    sum[1] += static_cast<double>(dy[at]) * xhat;
  }
};

__global__ void MeanKernel(int rows, int channels, int tiles,
                           const double* partial, double* sums,
                           float* saved_mean) {
  const int c = WarpChannel();
  if (c >= channels) return;
  const double sum = TileTotal(partial, 0, tiles, channels, c, Lane());
  if (Lane() != 0) return;
  sums[c] = sum;
  saved_mean[c] = elements::BatchNormMean(sum, rows);
}

__global__ void TrainingChannelKernel(int rows, int channels, int tiles,
                                      const double* partial, const double* sums,
                                      const float* gamma, float epsilon,
                                      float momentum, float* moving_mean,
                                      float* moving_variance,
                                      float* saved_inv_std, float* scale) {
  const int c = WarpChannel();
  if (c >= channels) return;
  const double centered = TileTotal(partial, 0, tiles, channels, c, Lane());
  if (Lane() != 0) return;
  const elements::BatchNormChannel k = elements::BatchNormTrainingChannel(
      sums[c], centered, rows, gamma[c], epsilon, momentum, &moving_mean[c],
      &moving_variance[c]);
  saved_inv_std[c] = k.inv_std;
  scale[c] = k.scale;
}

__global__ void ChannelSumKernel(int channels, int tiles, const double* partial,
                                 float* sums) {
  const int c = WarpChannel();
  if (c >= channels) return;
  const double sum = TileTotal(partial, 0, tiles, channels, c, Lane());
  if (Lane() == 0) sums[c] = static_cast<float>(sum);
}

__global__ void InferenceScaleKernel(int channels, const float* gamma,
                                     const float* moving_variance,
                                     float epsilon, float* scale) {
  const int c = blockIdx.x * blockDim.x + threadIdx.x;
  if (c >= channels) return;
  scale[c] =
      elements::BatchNormInferenceScale(gamma[c], moving_variance[c], epsilon);
}

__global__ void BackwardChannelKernel(int rows, int channels, int tiles,
                                      const double* partial, const float* gamma,
                                      const float* saved_inv_std, float* dgamma,
                                      float* dbeta,
                                      BatchNormGradChannel* grad) {
  const int c = WarpChannel();
  if (c >= channels) return;
  const double sum_dy = TileTotal(partial, 0, tiles, channels, c, Lane());
  const double sum_dy_xhat = TileTotal(partial, 1, tiles, channels, c, Lane());
  if (Lane() != 0) return;
  const BatchNormGradChannel k = elements::BatchNormBackwardChannel(
      sum_dy, sum_dy_xhat, rows, gamma[c], saved_inv_std[c]);
  grad[c] = k;
  dgamma[c] = k.dgamma;
  dbeta[c] = k.dbeta;
}

struct BatchNormApplyOp {
  int channels;
  const float* x;
  const float* mean;
  const float* scale;
  const float* beta;
  float* y;
  template <typename Index>
  __device__ void operator()(Index i) const {
    const Index c = i % channels;
    y[i] = elements::BatchNormApply(x[i], mean[c], scale[c], beta[c]);
  }
};

struct BatchNormInputGradOp {
  int channels;
  const float* x;
  const float* dy;
  const float* mean;
  const float* inv_std;
  const BatchNormGradChannel* grad;
  float* dx;
  template <typename Index>
  __device__ void operator()(Index i) const {
    const Index c = i % channels;
    const float xhat = elements::BatchNormXhat(x[i], mean[c], inv_std[c]);
    dx[i] = elements::BatchNormInputGrad(grad[c], dy[i], xhat);
  }
};

// Blocks for one thread per channel, and for one warp per channel.
unsigned ChannelGrid(int channels) {
  return (channels + kThreads - 1) / kThreads;
}
unsigned WarpChannelGrid(int channels) {
  return static_cast<unsigned>((int64_t{channels} * kWarp + kThreads - 1) /
                               kThreads);
}

}  // namespace

size_t BatchNormScratchBytes(int rows, int channels) {
  const size_t c = static_cast<size_t>(channels);
  return (2 * static_cast<size_t>(Tiles(rows)) * c + c) * sizeof(double) +
         c * sizeof(BatchNormGradChannel) + c * sizeof(float);
}

size_t BiasGradientScratchBytes(int rows, int cols) {
  return static_cast<size_t>(Tiles(rows)) * static_cast<size_t>(cols) *
         sizeof(double);
}

cudaError_t LaunchBiasGradient(int rows, int cols, const float* grad,
                               float* bias_grad, void* scratch,
                               cudaStream_t stream) {
  if (rows == 0) {
    return cudaMemsetAsync(bias_grad, 0, sizeof(float) * cols, stream);
  }
  double* partial = static_cast<double*>(scratch);
  if (cudaError_t e =
          ChannelPartials<1>(rows, cols, SumTerm{grad}, partial, stream);
      e != cudaSuccess) {
    return e;
  }
  LOCKSTEP_LAUNCH(ChannelSumKernel, WarpChannelGrid(cols), kThreads, 0, stream)
  (cols, Tiles(rows), partial, bias_grad);
  return cudaGetLastError();
}

cudaError_t LaunchBatchNormTraining(int rows, int channels, const float* x,
                                    const float* gamma, const float* beta,
                                    float epsilon, float momentum, float* y,
                                    float* moving_mean, float* moving_variance,
                                    float* saved_mean, float* saved_inv_std,
                                    void* scratch, cudaStream_t stream) {
  const BatchNormScratch s = Layout(scratch, rows, channels);
  const int tiles = Tiles(rows);
  // The mean first, then the variance from centered values: two passes, as
  // on the CPU, so the statistics hold whatever the rows' offset.
  if (cudaError_t e =
          ChannelPartials<1>(rows, channels, SumTerm{x}, s.partial, stream);
      e != cudaSuccess) {
    return e;
  }
  LOCKSTEP_LAUNCH(MeanKernel, WarpChannelGrid(channels), kThreads, 0, stream)
  (rows, channels, tiles, s.partial, s.sums, saved_mean);
  if (cudaError_t e = cudaGetLastError(); e != cudaSuccess) return e;
  if (cudaError_t e = ChannelPartials<1>(
          rows, channels, CenteredTerm{x, saved_mean}, s.partial, stream);
      e != cudaSuccess) {
    return e;
  }
  LOCKSTEP_LAUNCH(TrainingChannelKernel, WarpChannelGrid(channels), kThreads, 0,
                  stream)
  (rows, channels, tiles, s.partial, s.sums, gamma, epsilon, momentum,
   moving_mean, moving_variance, saved_inv_std, s.scale);
  if (cudaError_t e = cudaGetLastError(); e != cudaSuccess) return e;
  const int64_t total = int64_t{rows} * channels;
  return ForEach(total, total,
                 BatchNormApplyOp{channels, x, saved_mean, s.scale, beta, y},
                 stream);
}

cudaError_t LaunchBatchNormInference(int rows, int channels, const float* x,
                                     const float* gamma, const float* beta,
                                     const float* moving_mean,
                                     const float* moving_variance,
                                     float epsilon, float* y, void* scratch,
                                     cudaStream_t stream) {
  const BatchNormScratch s = Layout(scratch, rows, channels);
  LOCKSTEP_LAUNCH_INDEPENDENT(InferenceScaleKernel, ChannelGrid(channels),
                              kThreads, 0, stream)
  (channels, gamma, moving_variance, epsilon, s.scale);
  if (cudaError_t e = cudaGetLastError(); e != cudaSuccess) return e;
  const int64_t total = int64_t{rows} * channels;
  return ForEach(total, total,
                 BatchNormApplyOp{channels, x, moving_mean, s.scale, beta, y},
                 stream);
}

cudaError_t LaunchBatchNormBackward(int rows, int channels, const float* x,
                                    const float* dy, const float* gamma,
                                    const float* saved_mean,
                                    const float* saved_inv_std, float* dx,
                                    float* dgamma, float* dbeta, void* scratch,
                                    cudaStream_t stream) {
  const BatchNormScratch s = Layout(scratch, rows, channels);
  if (cudaError_t e = ChannelPartials<2>(
          rows, channels, GradTerm{x, dy, saved_mean, saved_inv_std}, s.partial,
          stream);
      e != cudaSuccess) {
    return e;
  }
  LOCKSTEP_LAUNCH(BackwardChannelKernel, WarpChannelGrid(channels), kThreads, 0,
                  stream)
  (rows, channels, Tiles(rows), s.partial, gamma, saved_inv_std, dgamma, dbeta,
   s.grad);
  if (cudaError_t e = cudaGetLastError(); e != cudaSuccess) return e;
  if (dx == nullptr) return cudaSuccess;
  const int64_t total = int64_t{rows} * channels;
  return ForEach(total, total,
                 BatchNormInputGradOp{channels, x, dy, saved_mean,
                                      saved_inv_std, s.grad, dx},
                 stream);
}

}  // namespace cuda_internal
}  // namespace lockstep
