#include "worker/model/nn/layer.h"

#include <utility>

#include "absl/strings/str_format.h"
#include "common/base/status_macros.h"

namespace lockstep {

std::string TensorShape::ToString() const {
  return absl::StrFormat("%dx%dx%d", height, width, channels);
}

int64_t ParamSpec::size() const {
  int64_t n = 1;
  for (int64_t d : shape) n *= d;
  return n;
}

Layer::Layer(std::string name, std::vector<TensorShape> inputs,
             TensorShape output)
    : name_(std::move(name)), inputs_(std::move(inputs)), output_(output) {}

int64_t Layer::NumParameters() const {
  int64_t n = 0;
  for (const ParamSpec& p : Parameters()) n += p.size();
  return n;
}

int64_t Layer::NumStates() const {
  int64_t n = 0;
  for (const ParamSpec& p : States()) n += p.size();
  return n;
}

absl::Status Layer::Prepare(Device* device, int max_batch) {
  if (device == nullptr) {
    return absl::InvalidArgumentError(
        absl::StrFormat("layer %s: device is null", name_));
  }
  if (device_ != nullptr) {
    return absl::FailedPreconditionError(
        absl::StrFormat("layer %s is already prepared", name_));
  }
  if (max_batch < 1) {
    return absl::InvalidArgumentError(absl::StrFormat(
        "layer %s: max_batch must be positive, got %d", name_, max_batch));
  }
  device_ = device;
  max_batch_ = max_batch;
  return Allocate();
}

absl::Status Layer::CheckBatch(const char* pass, int batch) const {
  if (device_ == nullptr) {
    return absl::FailedPreconditionError(
        absl::StrFormat("layer %s: %s before Prepare", name_, pass));
  }
  if (batch < 1 || batch > max_batch_) {
    return absl::InvalidArgumentError(
        absl::StrFormat("layer %s: %s over %d examples, want 1 to %d", name_,
                        pass, batch, max_batch_));
  }
  return absl::OkStatus();
}

absl::Status Layer::Forward(const ForwardArgs& args) {
  RETURN_IF_ERROR(CheckBatch("forward", args.batch));
  bool missing = args.inputs.size() != inputs_.size() ||
                 args.output == nullptr ||
                 (args.params == nullptr && NumParameters() > 0) ||
                 (args.state == nullptr && NumStates() > 0) ||
                 (args.workspace == nullptr && WorkspaceFloats(args.batch) > 0);
  for (const float* input : args.inputs) missing |= input == nullptr;
  if (missing) {
    return absl::InvalidArgumentError(absl::StrFormat(
        "layer %s: forward needs %d inputs, an output%s", name_, inputs_.size(),
        NumParameters() > 0 || NumStates() > 0 || WorkspaceFloats(1) > 0
            ? ", its parameters, state and workspace"
            : ""));
  }
  return RunForward(args);
}

absl::Status Layer::Backward(const BackwardArgs& args) {
  RETURN_IF_ERROR(CheckBatch("backward", args.batch));
  bool missing = args.inputs.size() != inputs_.size() ||
                 args.input_grads.size() != inputs_.size() ||
                 args.output == nullptr || args.output_grad == nullptr ||
                 (NumParameters() > 0 &&
                  (args.params == nullptr || args.param_grads == nullptr)) ||
                 (args.workspace == nullptr && WorkspaceFloats(args.batch) > 0);
  for (const float* input : args.inputs) missing |= input == nullptr;
  if (missing) {
    return absl::InvalidArgumentError(absl::StrFormat(
        "layer %s: backward needs %d inputs and input-gradient slots, the "
        "output and its gradient%s",
        name_, inputs_.size(),
        NumParameters() > 0 ? ", the parameters and their gradients" : ""));
  }
  return RunBackward(args);
}

}  // namespace lockstep
