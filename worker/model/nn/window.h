// Keras's padding modes for convolution and pooling windows, and the
// geometry they give (the same as TensorFlow's).
#ifndef LOCKSTEP_WORKER_MODEL_NN_WINDOW_H_
#define LOCKSTEP_WORKER_MODEL_NN_WINDOW_H_

#include <string>

#include "absl/status/statusor.h"
#include "worker/device/image_geometry.h"
#include "worker/model/nn/layer.h"

namespace lockstep {

enum class Padding {
  // Windows lie wholly inside the image: out = floor((in - k) / s) + 1.
  kValid,
  // out = ceil(in / s), padded by pad_total = max((out - 1) * s + k - in, 0)
  // split as TensorFlow does: pad_total / 2 before, the rest after (so a
  // stride-2 window over an even size pads only after).
  kSame,
};

// The window geometry (batch 0; the caller sets it per pass) of a
// window_height x window_width window with the given strides over `input`.
// INVALID_ARGUMENT naming `layer` when a size is below 1 or a 'valid' window
// does not fit.
absl::StatusOr<WindowGeometry> KerasWindow(const std::string& layer,
                                           const TensorShape& input,
                                           int window_height, int window_width,
                                           int stride_height, int stride_width,
                                           Padding padding);

}  // namespace lockstep

#endif  // LOCKSTEP_WORKER_MODEL_NN_WINDOW_H_
