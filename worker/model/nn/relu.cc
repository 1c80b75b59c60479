#include "worker/model/nn/relu.h"

#include <utility>

#include "absl/memory/memory.h"
#include "common/base/status_macros.h"

namespace lockstep {

absl::StatusOr<std::unique_ptr<ReLU>> ReLU::Create(std::string name,
                                                   const TensorShape& input) {
  return absl::WrapUnique(new ReLU(std::move(name), input));
}

ReLU::ReLU(std::string name, const TensorShape& input)
    : Layer(std::move(name), {input}, input) {}

absl::Status ReLU::RunForward(const ForwardArgs& args) {
  const size_t n = static_cast<size_t>(args.batch * output_shape().size());
  return device()->ReluForwardInto(n, args.inputs[0], args.output);
}

absl::Status ReLU::RunBackward(const BackwardArgs& args) {
  float* dx = args.input_grads[0];
  if (dx == nullptr) return absl::OkStatus();
  const size_t n = static_cast<size_t>(args.batch * output_shape().size());
  return device()->ReluBackwardInto(n, args.output, args.output_grad, dx);
}

}  // namespace lockstep
