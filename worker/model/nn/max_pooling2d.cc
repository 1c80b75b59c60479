#include "worker/model/nn/max_pooling2d.h"

#include <utility>

#include "absl/memory/memory.h"
#include "absl/strings/str_format.h"
#include "common/base/status_macros.h"

namespace lockstep {

absl::StatusOr<std::unique_ptr<MaxPooling2D>> MaxPooling2D::Create(
    std::string name, const TensorShape& input,
    const MaxPooling2DOptions& options) {
  const int stride_height =
      options.stride_height == 0 ? options.pool_height : options.stride_height;
  const int stride_width =
      options.stride_width == 0 ? options.pool_width : options.stride_width;
  ASSIGN_OR_RETURN(
      WindowGeometry window,
      KerasWindow(name, input, options.pool_height, options.pool_width,
                  stride_height, stride_width, options.padding));
  return absl::WrapUnique(new MaxPooling2D(std::move(name), input, window));
}

MaxPooling2D::MaxPooling2D(std::string name, const TensorShape& input,
                           const WindowGeometry& window)
    : Layer(std::move(name), {input},
            {window.out_height, window.out_width, input.channels}),
      window_(window) {}

absl::Status MaxPooling2D::Allocate() {
  ASSIGN_OR_RETURN(argmax_,
                   device()->Allocate(max_batch() * output_shape().size() *
                                      sizeof(int32_t)));
  return absl::OkStatus();
}

absl::Status MaxPooling2D::RunForward(const ForwardArgs& args) {
  WindowGeometry g = window_;
  g.input.batch = args.batch;
  RETURN_IF_ERROR(device()->MaxPoolForward(g, args.inputs[0], args.output,
                                           argmax_->As<int32_t>()));
  forward_batch_ = args.batch;
  return absl::OkStatus();
}

absl::Status MaxPooling2D::RunBackward(const BackwardArgs& args) {
  if (forward_batch_ != args.batch) {
    return absl::FailedPreconditionError(absl::StrFormat(
        "layer %s: backward over %d examples must follow a forward pass over "
        "them",
        name(), args.batch));
  }
  if (args.input_grads[0] == nullptr) return absl::OkStatus();
  WindowGeometry g = window_;
  g.input.batch = args.batch;
  return device()->MaxPoolBackward(g, args.output_grad, argmax_->As<int32_t>(),
                                   args.input_grads[0]);
}

}  // namespace lockstep
