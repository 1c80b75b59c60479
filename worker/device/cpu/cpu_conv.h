// The CPU device's direct convolution: AVX-512 kernels that compute a 2-D
// convolution, its input gradient and its kernel gradient straight from NHWC
// images and Keras's [height, width, in, out] kernels, without the im2col
// matrix that Conv2D otherwise builds and multiplies with OpenBLAS.
//
// Why: a ResNet-20 step through im2col + OpenBLAS spends about a quarter of
// its time copying windows into and out of the im2col matrix, and its Gemms
// have 16 to 64 columns, where OpenBLAS runs well below the machine's peak
// (and below half of it with the AVX2 kernels that OPENBLAS_CORETYPE=Haswell
// forces). Each kernel here holds a tile of outputs in vector registers and
// streams the inputs once; see docs/benchmarks.md for what it gains.
//
// Output maps at least 4 pixels wide get image tiles: up to 16 pixels of a
// row of one image, copied once into a zero-bordered scratch image (its
// padding made explicit) so that the kernels never test bounds. Narrower
// maps get batch tiles: one output pixel of up to 16 images, whose windows
// share the taps inside the image; the taps in the padding are skipped. Every
// sum runs in an order fixed by the geometry alone: the results are the
// same on every run and every AVX-512 machine, though not bit for bit those
// of im2col + Gemm.
#ifndef LOCKSTEP_WORKER_DEVICE_CPU_CPU_CONV_H_
#define LOCKSTEP_WORKER_DEVICE_CPU_CPU_CONV_H_

#include <cstdint>
#include <vector>

#include "absl/status/status.h"
#include "worker/device/image_geometry.h"

namespace lockstep {
namespace cpu_ops {

// Whether this processor runs the kernels (it has AVX-512F). When it does
// not, every call below returns FAILED_PRECONDITION and writes nothing.
bool DirectConvAvailable();

// Reusable host memory for the calls below: the padded image, a repacked
// kernel and a kernel-gradient accumulator. One per thread of a device
// (cpu_conv_runner.h); never shared between threads.
struct ConvScratch {
  std::vector<float> image;
  std::vector<float> kernel;
  std::vector<float> kernel_grad;
  std::vector<int64_t> offsets_a;  // Tap or pixel offsets, per call.
  std::vector<int64_t> offsets_b;
  std::vector<char> used_taps;
};

// y[n][oh][ow][f] = sum over the window's (i, j, c) of
//   x[n][oh * stride_height - pad_top + i][ow * stride_width - pad_left + j][c]
//   * kernel[i][j][c][f],
// zero outside the image; `window` describes x, y is window.OutputPixels() x
// filters.
absl::Status DirectConvForward(const WindowGeometry& window, int filters,
                               const float* x, const float* kernel, float* y,
                               ConvScratch* scratch);
// dx (overwritten) = the gradient of that sum with respect to x, given dy.
absl::Status DirectConvBackwardData(const WindowGeometry& window, int filters,
                                    const float* dy, const float* kernel,
                                    float* dx, ConvScratch* scratch);
// kernel_grad (overwritten, [i][j][c][f]) = the gradient with respect to
// the kernel, summed over the batch.
absl::Status DirectConvBackwardFilter(const WindowGeometry& window, int filters,
                                      const float* x, const float* dy,
                                      float* kernel_grad, ConvScratch* scratch);

}  // namespace cpu_ops
}  // namespace lockstep

#endif  // LOCKSTEP_WORKER_DEVICE_CPU_CPU_CONV_H_
