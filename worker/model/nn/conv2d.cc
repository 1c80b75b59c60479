#include "worker/model/nn/conv2d.h"

#include <algorithm>
#include <utility>

#include "absl/memory/memory.h"
#include "absl/strings/str_format.h"
#include "common/base/status_macros.h"

namespace lockstep {

absl::StatusOr<std::unique_ptr<Conv2D>> Conv2D::Create(
    std::string name, const TensorShape& input, const Conv2DOptions& options) {
  if (options.filters < 1) {
    return absl::InvalidArgumentError(absl::StrFormat(
        "layer %s: filters must be positive, got %d", name, options.filters));
  }
  ASSIGN_OR_RETURN(WindowGeometry window,
                   KerasWindow(name, input, options.kernel_height,
                               options.kernel_width, options.stride_height,
                               options.stride_width, options.padding));
  const TensorShape output = {window.out_height, window.out_width,
                              options.filters};
  return absl::WrapUnique(
      new Conv2D(std::move(name), input, output, options, window));
}

Conv2D::Conv2D(std::string name, const TensorShape& input,
               const TensorShape& output, const Conv2DOptions& options,
               const WindowGeometry& window)
    : Layer(std::move(name), {input}, output),
      options_(options),
      window_(window) {}

std::vector<ParamSpec> Conv2D::Parameters() const {
  const int64_t area = int64_t{options_.kernel_height} * options_.kernel_width;
  const int64_t in = input_shapes()[0].channels;
  std::vector<ParamSpec> params = {
      {"kernel",
       {options_.kernel_height, options_.kernel_width, in, options_.filters},
       Initializer::kGlorotUniform,
       area * in,
       area * options_.filters}};
  if (options_.use_bias) {
    params.push_back({"bias", {options_.filters}, Initializer::kZeros});
  }
  return params;
}

bool Conv2D::Pointwise() const {
  return window_.window_height == 1 && window_.window_width == 1 &&
         window_.stride_height == 1 && window_.stride_width == 1 &&
         window_.pad_top == 0 && window_.pad_left == 0;
}

int Conv2D::GroupSize(int batch) const {
  const int64_t per_image =
      int64_t{window_.out_height} * window_.out_width * window_.PatchSize();
  const int64_t fits =
      std::max<int64_t>(options_.workspace_limit_floats / per_image, 1);
  return static_cast<int>(std::min<int64_t>(fits, batch));
}

bool Conv2D::DeviceConvolves() const {
  return device() != nullptr &&
         device()->HasDirectConv(window_, options_.filters);
}

size_t Conv2D::WorkspaceFloats(int batch) const {
  if (Pointwise() || DeviceConvolves() || batch < 1) return 0;
  return static_cast<size_t>(GroupSize(batch)) * window_.out_height *
         window_.out_width * window_.PatchSize();
}

absl::Status Conv2D::RunForward(const ForwardArgs& args) {
  const int batch = args.batch;
  const int filters = options_.filters;
  const float* kernel = args.params;
  const int64_t pixels = int64_t{window_.out_height} * window_.out_width;
  const int patch = static_cast<int>(window_.PatchSize());
  if (Pointwise() && !DeviceConvolves()) {
    RETURN_IF_ERROR(device()->Gemm(
        /*trans_a=*/false, /*trans_b=*/false, static_cast<int>(batch * pixels),
        filters, patch, 1.0f, args.inputs[0], kernel, 0.0f, args.output));
  } else if (DeviceConvolves()) {
    WindowGeometry g = window_;
    g.input.batch = batch;
    RETURN_IF_ERROR(
        device()->ConvForward(g, filters, args.inputs[0], kernel, args.output));
  } else {
    const int group = GroupSize(batch);
    const int64_t in_size = input_shapes()[0].size();
    const int64_t out_size = output_shape().size();
    WindowGeometry g = window_;
    for (int start = 0; start < batch; start += group) {
      g.input.batch = std::min(group, batch - start);
      RETURN_IF_ERROR(device()->Im2Col(g, args.inputs[0] + start * in_size,
                                       args.workspace));
      RETURN_IF_ERROR(device()->Gemm(
          /*trans_a=*/false, /*trans_b=*/false,
          static_cast<int>(g.OutputPixels()), filters, patch, 1.0f,
          args.workspace, kernel, 0.0f, args.output + start * out_size));
    }
  }
  if (options_.use_bias) {
    RETURN_IF_ERROR(device()->AddBias(static_cast<int>(batch * pixels), filters,
                                      kernel + int64_t{patch} * filters,
                                      args.output));
  }
  return absl::OkStatus();
}

absl::Status Conv2D::RunBackward(const BackwardArgs& args) {
  const int64_t pixels = int64_t{window_.out_height} * window_.out_width;
  const int patch = static_cast<int>(window_.PatchSize());
  if (options_.use_bias) {
    RETURN_IF_ERROR(device()->BiasGradient(
        static_cast<int>(args.batch * pixels), options_.filters,
        args.output_grad,
        args.param_grads + int64_t{patch} * options_.filters));
  }
  if (Pointwise() && !DeviceConvolves()) {
    const int rows = static_cast<int>(args.batch * pixels);
    // dW = x^T . dy; dx = dy . W^T.
    RETURN_IF_ERROR(device()->Gemm(/*trans_a=*/true, /*trans_b=*/false, patch,
                                   options_.filters, rows, 1.0f, args.inputs[0],
                                   args.output_grad, 0.0f, args.param_grads));
    if (args.input_grads[0] == nullptr) return absl::OkStatus();
    return device()->Gemm(/*trans_a=*/false, /*trans_b=*/true, rows, patch,
                          options_.filters, 1.0f, args.output_grad, args.params,
                          0.0f, args.input_grads[0]);
  }
  if (DeviceConvolves()) {
    WindowGeometry g = window_;
    g.input.batch = args.batch;
    RETURN_IF_ERROR(
        device()->ConvBackwardFilter(g, options_.filters, args.inputs[0],
                                     args.output_grad, args.param_grads));
    if (args.input_grads[0] == nullptr) return absl::OkStatus();
    return device()->ConvBackwardData(g, options_.filters, args.output_grad,
                                      args.params, args.input_grads[0]);
  }
  return BackwardByColumns(args);
}

absl::Status Conv2D::BackwardByColumns(const BackwardArgs& args) {
  const int batch = args.batch;
  const int filters = options_.filters;
  const int patch = static_cast<int>(window_.PatchSize());
  const float* dy = args.output_grad;
  float* dx = args.input_grads[0];
  const int group = GroupSize(batch);
  const int64_t in_size = input_shapes()[0].size();
  const int64_t out_size = output_shape().size();
  WindowGeometry g = window_;
  for (int start = 0; start < batch; start += group) {
    g.input.batch = std::min(group, batch - start);
    const int rows = static_cast<int>(g.OutputPixels());
    const float* group_dy = dy + start * out_size;
    RETURN_IF_ERROR(
        device()->Im2Col(g, args.inputs[0] + start * in_size, args.workspace));
    // dW = sum over groups of columns^T . dy.
    RETURN_IF_ERROR(device()->Gemm(
        /*trans_a=*/true, /*trans_b=*/false, patch, filters, rows, 1.0f,
        args.workspace, group_dy, start == 0 ? 0.0f : 1.0f, args.param_grads));
    if (dx != nullptr) {
      // The columns' gradient reuses the workspace, then folds into dx.
      RETURN_IF_ERROR(device()->Gemm(/*trans_a=*/false, /*trans_b=*/true, rows,
                                     patch, filters, 1.0f, group_dy,
                                     args.params, 0.0f, args.workspace));
      RETURN_IF_ERROR(
          device()->Col2Im(g, args.workspace, dx + start * in_size));
    }
  }
  return absl::OkStatus();
}

}  // namespace lockstep
