#include "worker/device/image_geometry.h"

#include <cstdint>
#include <limits>

#include "absl/strings/str_format.h"

namespace lockstep {

absl::Status ValidateShape(const char* op, const NhwcShape& shape) {
  if (shape.batch < 0 || shape.height < 0 || shape.width < 0 ||
      shape.channels < 0) {
    return absl::InvalidArgumentError(absl::StrFormat(
        "%s: negative image shape %d x %d x %d x %d", op, shape.batch,
        shape.height, shape.width, shape.channels));
  }
  return absl::OkStatus();
}

absl::Status ValidatePadding(const char* op, const Padding2D& padding) {
  if (padding.top < 0 || padding.bottom < 0 || padding.left < 0 ||
      padding.right < 0) {
    return absl::InvalidArgumentError(absl::StrFormat(
        "%s: negative padding (top %d, bottom %d, left %d, right %d)", op,
        padding.top, padding.bottom, padding.left, padding.right));
  }
  return absl::OkStatus();
}

absl::Status ValidateWindow(const char* op, const WindowGeometry& window) {
  if (absl::Status s = ValidateShape(op, window.input); !s.ok()) return s;
  if (window.window_height < 1 || window.window_width < 1 ||
      window.stride_height < 1 || window.stride_width < 1) {
    return absl::InvalidArgumentError(absl::StrFormat(
        "%s: window %d x %d and strides %d x %d must be positive", op,
        window.window_height, window.window_width, window.stride_height,
        window.stride_width));
  }
  if (window.pad_top < 0 || window.pad_left < 0 || window.out_height < 0 ||
      window.out_width < 0) {
    return absl::InvalidArgumentError(absl::StrFormat(
        "%s: negative padding (%d, %d) or output size %d x %d", op,
        window.pad_top, window.pad_left, window.out_height, window.out_width));
  }
  // Every implementation (the CPU loops, the CUDA element functions) computes
  // window positions, oh * stride - pad + i, and image row plus padding in
  // int: refuse geometries where they would not fit.
  constexpr int64_t kMax = std::numeric_limits<int>::max();
  const int64_t last_row =
      int64_t{window.out_height - 1} * window.stride_height +
      window.window_height;
  const int64_t last_col =
      int64_t{window.out_width - 1} * window.stride_width + window.window_width;
  if (last_row > kMax || last_col > kMax ||
      int64_t{window.input.height} + window.pad_top > kMax ||
      int64_t{window.input.width} + window.pad_left > kMax) {
    return absl::InvalidArgumentError(absl::StrFormat(
        "%s: window positions out of range: %d x %d outputs with strides "
        "%d x %d over a %d x %d image padded by (%d, %d)",
        op, window.out_height, window.out_width, window.stride_height,
        window.stride_width, window.input.height, window.input.width,
        window.pad_top, window.pad_left));
  }
  return absl::OkStatus();
}

elements::Window ToElements(const WindowGeometry& g) {
  return {g.input.batch,   g.input.height, g.input.width,  g.input.channels,
          g.window_height, g.window_width, g.stride_height, g.stride_width,
          g.pad_top,       g.pad_left,     g.out_height,    g.out_width};
}

elements::Pad ToElements(const NhwcShape& s, const Padding2D& p) {
  return {s.batch, s.height, s.width, s.channels,
          p.top,   p.bottom, p.left,  p.right};
}

}  // namespace lockstep
