#include "worker/device/cuda/image_kernels.h"
#include "worker/device/cuda/kernel_util.cuh"

namespace lockstep {
namespace cuda_internal {
namespace {

int64_t InputSize(const elements::Window& g) {
  return int64_t{g.batch} * g.height * g.width * g.channels;
}
int64_t OutputPixels(const elements::Window& g) {
  return int64_t{g.batch} * g.out_height * g.out_width;
}
int64_t PatchSize(const elements::Window& g) {
  return int64_t{g.window_height} * g.window_width * g.channels;
}
int64_t Larger(int64_t a, int64_t b) { return a > b ? a : b; }

// ---- Element-wise ops: image_op_elements.h at every index ----

struct AxpyOp {
  float alpha;
  const float* x;
  float* y;
  template <typename Index>
  __device__ void operator()(Index i) const {
    y[i] += alpha * x[i];
  }
};

struct Im2ColOp {
  elements::Window g;
  const float* image;
  float* columns;
  template <typename Index>
  __device__ void operator()(Index i) const {
    columns[i] = elements::Im2ColAt(g, image, i);
  }
};

struct Col2ImOp {
  elements::Window g;
  const float* columns;
  float* image;
  template <typename Index>
  __device__ void operator()(Index i) const {
    image[i] = elements::Col2ImAt(g, columns, i);
  }
};

struct MaxPoolOp {
  elements::Window g;
  const float* x;
  float* y;
  int32_t* argmax;
  template <typename Index>
  __device__ void operator()(Index i) const {
    elements::MaxPoolAt(g, x, i, y, argmax);
  }
};

struct MaxPoolGradOp {
  elements::Window g;
  const float* dy;
  const int32_t* argmax;
  float* dx;
  template <typename Index>
  __device__ void operator()(Index i) const {
    dx[i] = elements::MaxPoolGradAt(g, dy, argmax, i);
  }
};

struct ZeroPadOp {
  elements::Pad p;
  const float* x;
  float* y;
  template <typename Index>
  __device__ void operator()(Index i) const {
    y[i] = elements::ZeroPadAt(p, x, i);
  }
};

struct ZeroPadGradOp {
  elements::Pad p;
  const float* dy;
  float* dx;
  template <typename Index>
  __device__ void operator()(Index i) const {
    dx[i] = elements::ZeroPadGradAt(p, dy, i);
  }
};

struct GlobalAvgPoolOp {
  int pixels;
  int channels;
  const float* x;
  float* y;
  template <typename Index>
  __device__ void operator()(Index i) const {
    y[i] = elements::GlobalAvgPoolAt(pixels, channels, x, i);
  }
};

struct GlobalAvgPoolGradOp {
  int pixels;
  int channels;
  const float* dy;
  float* dx;
  template <typename Index>
  __device__ void operator()(Index i) const {
    dx[i] = elements::GlobalAvgPoolGradAt(pixels, channels, dy, i);
  }
};

}  // namespace

cudaError_t LaunchAxpy(size_t n, float alpha, const float* x, float* y,
                       cudaStream_t stream) {
  const auto count = static_cast<int64_t>(n);
  return ForEach(count, count, AxpyOp{alpha, x, y}, stream);
}

cudaError_t LaunchIm2Col(const elements::Window& g, const float* image,
                         float* columns, cudaStream_t stream) {
  const int64_t total = OutputPixels(g) * PatchSize(g);
  return ForEach(total, Larger(total, InputSize(g)),
                 Im2ColOp{g, image, columns}, stream);
}

cudaError_t LaunchCol2Im(const elements::Window& g, const float* columns,
                         float* image, cudaStream_t stream) {
  const int64_t total = InputSize(g);
  return ForEach(total, Larger(total, OutputPixels(g) * PatchSize(g)),
                 Col2ImOp{g, columns, image}, stream);
}

cudaError_t LaunchMaxPoolForward(const elements::Window& g, const float* x,
                                 float* y, int32_t* argmax,
                                 cudaStream_t stream) {
  const int64_t total = OutputPixels(g) * g.channels;
  return ForEach(total, Larger(total, InputSize(g)), MaxPoolOp{g, x, y, argmax},
                 stream);
}

cudaError_t LaunchMaxPoolBackward(const elements::Window& g, const float* dy,
                                  const int32_t* argmax, float* dx,
                                  cudaStream_t stream) {
  const int64_t total = InputSize(g);
  return ForEach(total, Larger(total, OutputPixels(g) * g.channels),
                 MaxPoolGradOp{g, dy, argmax, dx}, stream);
}

cudaError_t LaunchZeroPad2D(const elements::Pad& p, const float* x, float* y,
                            cudaStream_t stream) {
  const int64_t total = int64_t{p.batch} *
                        (int64_t{p.height} + p.top + p.bottom) *
                        (int64_t{p.width} + p.left + p.right) * p.channels;
  return ForEach(total, total, ZeroPadOp{p, x, y}, stream);
}

cudaError_t LaunchZeroPad2DBackward(const elements::Pad& p, const float* dy,
                                    float* dx, cudaStream_t stream) {
  const int64_t padded = int64_t{p.batch} *
                         (int64_t{p.height} + p.top + p.bottom) *
                         (int64_t{p.width} + p.left + p.right) * p.channels;
  const int64_t total = int64_t{p.batch} * p.height * p.width * p.channels;
  return ForEach(total, padded, ZeroPadGradOp{p, dy, dx}, stream);
}

cudaError_t LaunchGlobalAvgPool(int batch, int pixels, int channels,
                                const float* x, float* y, cudaStream_t stream) {
  return ForEach(int64_t{batch} * channels, int64_t{batch} * pixels * channels,
                 GlobalAvgPoolOp{pixels, channels, x, y}, stream);
}

cudaError_t LaunchGlobalAvgPoolBackward(int batch, int pixels, int channels,
                                        const float* dy, float* dx,
                                        cudaStream_t stream) {
  const int64_t total = int64_t{batch} * pixels * channels;
  return ForEach(total, total, GlobalAvgPoolGradOp{pixels, channels, dy, dx},
                 stream);
}

}  // namespace cuda_internal
}  // namespace lockstep
