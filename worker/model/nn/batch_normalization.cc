#include "worker/model/nn/batch_normalization.h"

#include <cmath>
#include <utility>

#include "absl/memory/memory.h"
#include "absl/strings/str_format.h"
#include "common/base/status_macros.h"

namespace lockstep {

absl::StatusOr<std::unique_ptr<BatchNormalization>> BatchNormalization::Create(
    std::string name, const TensorShape& input,
    const BatchNormOptions& options) {
  if (input.size() < 1) {
    return absl::InvalidArgumentError(
        absl::StrFormat("layer %s: empty input %s", name, input.ToString()));
  }
  if (!(options.momentum >= 0.0f && options.momentum <= 1.0f) ||
      !(options.epsilon > 0.0f) || !std::isfinite(options.epsilon)) {
    return absl::InvalidArgumentError(absl::StrFormat(
        "layer %s: momentum %g must be in [0, 1] and epsilon %g positive", name,
        options.momentum, options.epsilon));
  }
  return absl::WrapUnique(
      new BatchNormalization(std::move(name), input, options));
}

BatchNormalization::BatchNormalization(std::string name,
                                       const TensorShape& input,
                                       const BatchNormOptions& options)
    : Layer(std::move(name), {input}, input), options_(options) {}

std::vector<ParamSpec> BatchNormalization::Parameters() const {
  const int64_t c = output_shape().channels;
  return {{"gamma", {c}, Initializer::kOnes},
          {"beta", {c}, Initializer::kZeros}};
}

std::vector<ParamSpec> BatchNormalization::States() const {
  const int64_t c = output_shape().channels;
  return {{"moving_mean", {c}, Initializer::kZeros},
          {"moving_variance", {c}, Initializer::kOnes}};
}

absl::Status BatchNormalization::Allocate() {
  ASSIGN_OR_RETURN(
      saved_, device()->Allocate(2 * output_shape().channels * sizeof(float)));
  return absl::OkStatus();
}

absl::Status BatchNormalization::RunForward(const ForwardArgs& args) {
  const TensorShape& shape = output_shape();
  const int channels = shape.channels;
  const int rows = static_cast<int>(args.batch * (shape.size() / channels));
  const float* gamma = args.params;
  const float* beta = args.params + channels;
  float* moving_mean = args.state;
  float* moving_variance = args.state + channels;
  if (!args.training) {
    // An inference pass leaves the saved statistics alone but they no
    // longer describe the activations a backward pass would see.
    trained_batch_ = 0;
    return device()->BatchNormInference(rows, channels, args.inputs[0], gamma,
                                        beta, moving_mean, moving_variance,
                                        options_.epsilon, args.output);
  }
  float* saved = saved_->As<float>();
  RETURN_IF_ERROR(device()->BatchNormTraining(
      rows, channels, args.inputs[0], gamma, beta, options_.epsilon,
      options_.momentum, args.output, moving_mean, moving_variance, saved,
      saved + channels));
  trained_batch_ = args.batch;
  return absl::OkStatus();
}

absl::Status BatchNormalization::RunBackward(const BackwardArgs& args) {
  if (trained_batch_ != args.batch) {
    return absl::FailedPreconditionError(absl::StrFormat(
        "layer %s: backward over %d examples must follow a training forward "
        "pass over them",
        name(), args.batch));
  }
  const TensorShape& shape = output_shape();
  const int channels = shape.channels;
  const int rows = static_cast<int>(args.batch * (shape.size() / channels));
  const float* saved = saved_->As<float>();
  return device()->BatchNormBackward(
      rows, channels, args.inputs[0], args.output_grad, args.params, saved,
      saved + channels, args.input_grads[0], args.param_grads,
      args.param_grads + channels);
}

}  // namespace lockstep
