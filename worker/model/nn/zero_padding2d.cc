#include "worker/model/nn/zero_padding2d.h"

#include <utility>

#include "absl/memory/memory.h"
#include "absl/strings/str_format.h"
#include "common/base/status_macros.h"

namespace lockstep {

absl::StatusOr<std::unique_ptr<ZeroPadding2D>> ZeroPadding2D::Create(
    std::string name, const TensorShape& input, const Padding2D& padding) {
  RETURN_IF_ERROR(ValidatePadding(name.c_str(), padding));
  const TensorShape output = {input.height + padding.top + padding.bottom,
                              input.width + padding.left + padding.right,
                              input.channels};
  return absl::WrapUnique(
      new ZeroPadding2D(std::move(name), input, output, padding));
}

ZeroPadding2D::ZeroPadding2D(std::string name, const TensorShape& input,
                             const TensorShape& output,
                             const Padding2D& padding)
    : Layer(std::move(name), {input}, output), padding_(padding) {}

absl::Status ZeroPadding2D::RunForward(const ForwardArgs& args) {
  return device()->ZeroPad2D(input_shapes()[0].Batch(args.batch), padding_,
                             args.inputs[0], args.output);
}

absl::Status ZeroPadding2D::RunBackward(const BackwardArgs& args) {
  if (args.input_grads[0] == nullptr) return absl::OkStatus();
  return device()->ZeroPad2DBackward(input_shapes()[0].Batch(args.batch),
                                     padding_, args.output_grad,
                                     args.input_grads[0]);
}

}  // namespace lockstep
