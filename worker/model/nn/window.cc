#include "worker/model/nn/window.h"

#include <algorithm>

#include "absl/strings/str_format.h"

namespace lockstep {
namespace {

struct Extent {
  int out;
  int pad_before;
};

Extent KerasExtent(int in, int window, int stride, Padding padding) {
  if (padding == Padding::kValid) return {(in - window) / stride + 1, 0};
  const int out = (in + stride - 1) / stride;
  const int pad_total = std::max((out - 1) * stride + window - in, 0);
  return {out, pad_total / 2};
}

}  // namespace

absl::StatusOr<WindowGeometry> KerasWindow(const std::string& layer,
                                           const TensorShape& input,
                                           int window_height, int window_width,
                                           int stride_height, int stride_width,
                                           Padding padding) {
  if (input.height < 1 || input.width < 1 || input.channels < 1) {
    return absl::InvalidArgumentError(absl::StrFormat(
        "layer %s: input %s has an empty dimension", layer, input.ToString()));
  }
  if (window_height < 1 || window_width < 1 || stride_height < 1 ||
      stride_width < 1) {
    return absl::InvalidArgumentError(absl::StrFormat(
        "layer %s: window %dx%d and strides %dx%d must be positive", layer,
        window_height, window_width, stride_height, stride_width));
  }
  if (padding == Padding::kValid &&
      (window_height > input.height || window_width > input.width)) {
    return absl::InvalidArgumentError(absl::StrFormat(
        "layer %s: a %dx%d window with 'valid' padding does not fit the "
        "input %s",
        layer, window_height, window_width, input.ToString()));
  }
  const Extent rows =
      KerasExtent(input.height, window_height, stride_height, padding);
  const Extent cols =
      KerasExtent(input.width, window_width, stride_width, padding);
  WindowGeometry g;
  g.input = input.Batch(0);
  g.window_height = window_height;
  g.window_width = window_width;
  g.stride_height = stride_height;
  g.stride_width = stride_width;
  g.pad_top = rows.pad_before;
  g.pad_left = cols.pad_before;
  g.out_height = rows.out;
  g.out_width = cols.out;
  return g;
}

}  // namespace lockstep
