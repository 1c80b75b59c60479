#include "worker/model/nn/flatten.h"

#include <utility>

#include "absl/memory/memory.h"
#include "absl/strings/str_format.h"

namespace lockstep {

absl::StatusOr<std::unique_ptr<Flatten>> Flatten::Create(
    std::string name, const TensorShape& input) {
  if (input.size() < 1 || input.size() > (int64_t{1} << 31) - 1) {
    return absl::InvalidArgumentError(
        absl::StrFormat("layer %s: cannot flatten %s", name, input.ToString()));
  }
  return absl::WrapUnique(new Flatten(std::move(name), input));
}

Flatten::Flatten(std::string name, const TensorShape& input)
    : Layer(std::move(name), {input}, {1, 1, static_cast<int>(input.size())}) {}

// The memory layout is already the flat one: both passes copy.
absl::Status Flatten::RunForward(const ForwardArgs& args) {
  return device()->CopyOnDevice(
      args.inputs[0], args.output,
      static_cast<size_t>(args.batch * output_shape().size()) * sizeof(float));
}

absl::Status Flatten::RunBackward(const BackwardArgs& args) {
  if (args.input_grads[0] == nullptr) return absl::OkStatus();
  return device()->CopyOnDevice(
      args.output_grad, args.input_grads[0],
      static_cast<size_t>(args.batch * output_shape().size()) * sizeof(float));
}

}  // namespace lockstep
