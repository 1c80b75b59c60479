// Geometry of the image operations of Device: batches of NHWC fp32 images,
// the zero padding around them, and the windows that convolution and pooling
// slide over them. Plain values; the layers in worker/model/nn compute them,
// the devices check them with the Validate functions before touching memory.
#ifndef LOCKSTEP_WORKER_DEVICE_IMAGE_GEOMETRY_H_
#define LOCKSTEP_WORKER_DEVICE_IMAGE_GEOMETRY_H_

#include <cstdint>

#include "absl/status/status.h"
#include "worker/device/image_op_elements.h"

namespace lockstep {

// A batch of `batch` images of height x width x channels, stored NHWC
// (channels fastest).
struct NhwcShape {
  int batch = 0;
  int height = 0;
  int width = 0;
  int channels = 0;

  int64_t ImageSize() const { return int64_t{height} * width * channels; }
  int64_t Size() const { return batch * ImageSize(); }
};

// Rows and columns of zeros added around each image.
struct Padding2D {
  int top = 0;
  int bottom = 0;
  int left = 0;
  int right = 0;
};

// A window of window_height x window_width pixels (all channels) that moves
// by the strides over `input`, padded by pad_top rows above and pad_left
// columns on the left (zeros for convolution, ignored by max pooling);
// output pixel (oh, ow) reads input rows oh * stride_height - pad_top ...
// and columns ow * stride_width - pad_left ... . The padding below and on the
// right is whatever the output size implies.
struct WindowGeometry {
  NhwcShape input;
  int window_height = 1;
  int window_width = 1;
  int stride_height = 1;
  int stride_width = 1;
  int pad_top = 0;
  int pad_left = 0;
  int out_height = 0;
  int out_width = 0;

  // Output pixels over the batch: the rows of the im2col matrix.
  int64_t OutputPixels() const {
    return int64_t{input.batch} * out_height * out_width;
  }
  // window_height * window_width * channels: the im2col matrix's width.
  int64_t PatchSize() const {
    return int64_t{window_height} * window_width * input.channels;
  }
};

// INVALID_ARGUMENT naming `op` when a size is negative, a window or stride
// is below 1, or a padding is negative.
absl::Status ValidateShape(const char* op, const NhwcShape& shape);
absl::Status ValidatePadding(const char* op, const Padding2D& padding);
absl::Status ValidateWindow(const char* op, const WindowGeometry& window);

// The same numbers as the plain structs of image_op_elements.h, which the
// CUDA kernels take.
elements::Window ToElements(const WindowGeometry& window);
elements::Pad ToElements(const NhwcShape& shape, const Padding2D& padding);

}  // namespace lockstep

#endif  // LOCKSTEP_WORKER_DEVICE_IMAGE_GEOMETRY_H_
