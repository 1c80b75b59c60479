#include "worker/model/nn/dense.h"

#include <utility>

#include "absl/memory/memory.h"
#include "absl/strings/str_format.h"
#include "common/base/status_macros.h"

namespace lockstep {

absl::StatusOr<std::unique_ptr<Dense>> Dense::Create(
    std::string name, const TensorShape& input, const DenseOptions& options) {
  if (options.units < 1 || input.size() < 1) {
    return absl::InvalidArgumentError(absl::StrFormat(
        "layer %s: %d units over input %s; both must be non-empty", name,
        options.units, input.ToString()));
  }
  return absl::WrapUnique(new Dense(std::move(name), input, options));
}

Dense::Dense(std::string name, const TensorShape& input,
             const DenseOptions& options)
    : Layer(std::move(name), {input},
            {input.height, input.width, options.units}),
      options_(options) {}

std::vector<ParamSpec> Dense::Parameters() const {
  const int64_t in = input_shapes()[0].channels;
  std::vector<ParamSpec> params = {{"kernel",
                                    {in, options_.units},
                                    Initializer::kGlorotUniform,
                                    in,
                                    options_.units}};
  if (options_.use_bias) {
    params.push_back({"bias", {options_.units}, Initializer::kZeros});
  }
  return params;
}

absl::Status Dense::RunForward(const ForwardArgs& args) {
  const TensorShape& in = input_shapes()[0];
  const int rows = args.batch * in.height * in.width;
  RETURN_IF_ERROR(device()->Gemm(
      /*trans_a=*/false, /*trans_b=*/false, rows, options_.units, in.channels,
      1.0f, args.inputs[0], args.params, 0.0f, args.output));
  if (!options_.use_bias) return absl::OkStatus();
  return device()->AddBias(rows, options_.units,
                           args.params + int64_t{in.channels} * options_.units,
                           args.output);
}

absl::Status Dense::RunBackward(const BackwardArgs& args) {
  const TensorShape& in = input_shapes()[0];
  const int rows = args.batch * in.height * in.width;
  // dW = x^T . dy, db = column sums of dy, dx = dy . W^T.
  RETURN_IF_ERROR(device()->Gemm(
      /*trans_a=*/true, /*trans_b=*/false, in.channels, options_.units, rows,
      1.0f, args.inputs[0], args.output_grad, 0.0f, args.param_grads));
  if (options_.use_bias) {
    RETURN_IF_ERROR(device()->BiasGradient(
        rows, options_.units, args.output_grad,
        args.param_grads + int64_t{in.channels} * options_.units));
  }
  if (args.input_grads[0] == nullptr) return absl::OkStatus();
  return device()->Gemm(/*trans_a=*/false, /*trans_b=*/true, rows, in.channels,
                        options_.units, 1.0f, args.output_grad, args.params,
                        0.0f, args.input_grads[0]);
}

}  // namespace lockstep
