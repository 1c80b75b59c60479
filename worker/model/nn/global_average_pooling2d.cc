#include "worker/model/nn/global_average_pooling2d.h"

#include <utility>

#include "absl/memory/memory.h"
#include "absl/strings/str_format.h"

namespace lockstep {

absl::StatusOr<std::unique_ptr<GlobalAveragePooling2D>>
GlobalAveragePooling2D::Create(std::string name, const TensorShape& input) {
  if (input.size() < 1) {
    return absl::InvalidArgumentError(
        absl::StrFormat("layer %s: empty input %s", name, input.ToString()));
  }
  return absl::WrapUnique(new GlobalAveragePooling2D(std::move(name), input));
}

GlobalAveragePooling2D::GlobalAveragePooling2D(std::string name,
                                               const TensorShape& input)
    : Layer(std::move(name), {input}, {1, 1, input.channels}) {}

absl::Status GlobalAveragePooling2D::RunForward(const ForwardArgs& args) {
  const TensorShape& in = input_shapes()[0];
  return device()->GlobalAvgPool(args.batch, in.height * in.width, in.channels,
                                 args.inputs[0], args.output);
}

absl::Status GlobalAveragePooling2D::RunBackward(const BackwardArgs& args) {
  if (args.input_grads[0] == nullptr) return absl::OkStatus();
  const TensorShape& in = input_shapes()[0];
  return device()->GlobalAvgPoolBackward(args.batch, in.height * in.width,
                                         in.channels, args.output_grad,
                                         args.input_grads[0]);
}

}  // namespace lockstep
