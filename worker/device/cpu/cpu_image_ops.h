// The CPU device's image operations (im2col, pooling, padding): plain loops
// over host memory, with Device's semantics (see worker/device/device.h), which
// CpuDevice forwards to. Each checks its arguments first and writes nothing
// when they are bad. Stateless and thread-compatible.
#ifndef LOCKSTEP_WORKER_DEVICE_CPU_CPU_IMAGE_OPS_H_
#define LOCKSTEP_WORKER_DEVICE_CPU_CPU_IMAGE_OPS_H_

#include <cstdint>

#include "absl/status/status.h"
#include "worker/device/image_geometry.h"

namespace lockstep {
namespace cpu_ops {

absl::Status Im2Col(const WindowGeometry& window, const float* image,
                    float* columns);
absl::Status Col2Im(const WindowGeometry& window, const float* columns,
                    float* image);
absl::Status MaxPoolForward(const WindowGeometry& window, const float* x,
                            float* y, int32_t* argmax);
absl::Status MaxPoolBackward(const WindowGeometry& window, const float* dy,
                             const int32_t* argmax, float* dx);
absl::Status ZeroPad2D(const NhwcShape& x_shape, const Padding2D& padding,
                       const float* x, float* y);
absl::Status ZeroPad2DBackward(const NhwcShape& x_shape,
                               const Padding2D& padding, const float* dy,
                               float* dx);
absl::Status GlobalAvgPool(int batch, int pixels, int channels, const float* x,
                           float* y);
absl::Status GlobalAvgPoolBackward(int batch, int pixels, int channels,
                                   const float* dy, float* dx);
}  // namespace cpu_ops
}  // namespace lockstep

#endif  // LOCKSTEP_WORKER_DEVICE_CPU_CPU_IMAGE_OPS_H_
