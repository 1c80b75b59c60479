#include "worker/model/nn/add.h"

#include <utility>

#include "absl/memory/memory.h"
#include "absl/strings/str_format.h"
#include "common/base/status_macros.h"

namespace lockstep {

absl::StatusOr<std::unique_ptr<Add>> Add::Create(std::string name,
                                                 const TensorShape& a,
                                                 const TensorShape& b) {
  if (a != b) {
    return absl::InvalidArgumentError(
        absl::StrFormat("layer %s: cannot add tensors of shapes %s and %s",
                        name, a.ToString(), b.ToString()));
  }
  return absl::WrapUnique(new Add(std::move(name), a));
}

Add::Add(std::string name, const TensorShape& shape)
    : Layer(std::move(name), {shape, shape}, shape) {}

absl::Status Add::RunForward(const ForwardArgs& args) {
  const size_t n = static_cast<size_t>(args.batch * output_shape().size());
  RETURN_IF_ERROR(
      device()->CopyOnDevice(args.inputs[0], args.output, n * sizeof(float)));
  return device()->Axpy(n, 1.0f, args.inputs[1], args.output);
}

absl::Status Add::RunBackward(const BackwardArgs& args) {
  const size_t bytes =
      static_cast<size_t>(args.batch * output_shape().size()) * sizeof(float);
  for (float* dx : args.input_grads) {
    if (dx != nullptr) {
      RETURN_IF_ERROR(device()->CopyOnDevice(args.output_grad, dx, bytes));
    }
  }
  return absl::OkStatus();
}

}  // namespace lockstep
