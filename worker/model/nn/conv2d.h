// Keras's Conv2D (channels_last): a filters-channel output from a
// [kernel_height, kernel_width, in_channels, filters] kernel and an optional
// bias, with strides and 'valid' / 'same' padding (see window.h).
//
// Where the device has a convolution of its own for the layer's geometry
// (Device::HasDirectConv: the CPU device's AVX-512 kernels), the layer calls
// it, 1x1 stride-1 kernels included. Otherwise it is computed as im2col +
// Gemm: each group of images is unfolded into the workspace (one row per
// output pixel) and multiplied by the kernel; the backward pass unfolds
// again (rather than keeping the forward's columns) and folds the column
// gradients back with Col2Im. A 1x1, stride-1 kernel needs no unfolding: the
// input already is the column matrix, one Gemm. The group size keeps the
// workspace under Conv2DOptions::workspace_limit_floats.
// Externally synchronized.
#ifndef LOCKSTEP_WORKER_MODEL_NN_CONV2D_H_
#define LOCKSTEP_WORKER_MODEL_NN_CONV2D_H_

#include <cstdint>
#include <memory>
#include <string>
#include <vector>

#include "absl/status/statusor.h"
#include "worker/device/image_geometry.h"
#include "worker/model/nn/layer.h"
#include "worker/model/nn/window.h"

namespace lockstep {

struct Conv2DOptions {
  int filters = 1;
  int kernel_height = 1;
  int kernel_width = 1;
  int stride_height = 1;
  int stride_width = 1;
  Padding padding = Padding::kValid;  // Keras's default.
  bool use_bias = true;               // Keras's default.
  // Bound on the im2col workspace; at least one image's columns are used
  // whatever it says. 16 Mi floats is 64 MiB.
  int64_t workspace_limit_floats = int64_t{16} << 20;
};

class Conv2D final : public Layer {
 public:
  static absl::StatusOr<std::unique_ptr<Conv2D>> Create(
      std::string name, const TensorShape& input, const Conv2DOptions& options);

  // kernel [kh, kw, in, filters], Glorot-uniform with fan_in = kh * kw * in
  // and fan_out = kh * kw * filters (as Keras computes them); bias [filters],
  // zeros.
  std::vector<ParamSpec> Parameters() const override;
  size_t WorkspaceFloats(int batch) const override;

  const WindowGeometry& window() const { return window_; }

 private:
  Conv2D(std::string name, const TensorShape& input, const TensorShape& output,
         const Conv2DOptions& options, const WindowGeometry& window);

  absl::Status RunForward(const ForwardArgs& args) override;
  absl::Status RunBackward(const BackwardArgs& args) override;
  // The backward pass through Im2Col, Gemm and Col2Im, over groups of the
  // batch (GroupSize) whose columns fit the workspace.
  absl::Status BackwardByColumns(const BackwardArgs& args);

  // True when the input needs no unfolding (1x1 window, stride 1, no pad).
  bool Pointwise() const;
  // True when the device convolves this window itself (after Prepare).
  bool DeviceConvolves() const;
  // Images per im2col group for a batch of `batch`.
  int GroupSize(int batch) const;

  const Conv2DOptions options_;
  const WindowGeometry window_;  // batch 0; set per group.
};

}  // namespace lockstep

#endif  // LOCKSTEP_WORKER_MODEL_NN_CONV2D_H_
