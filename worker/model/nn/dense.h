// Keras's Dense: y = x . kernel + bias over the last axis, so a 1 x 1 x n
// input (after Flatten or global pooling) is the usual fully connected layer
// and an image input applies the same kernel at every pixel, as in Keras.
// Externally synchronized.
#ifndef LOCKSTEP_WORKER_MODEL_NN_DENSE_H_
#define LOCKSTEP_WORKER_MODEL_NN_DENSE_H_

#include <memory>
#include <string>
#include <vector>

#include "absl/status/statusor.h"
#include "worker/model/nn/layer.h"

namespace lockstep {

struct DenseOptions {
  int units = 1;
  bool use_bias = true;
};

class Dense final : public Layer {
 public:
  static absl::StatusOr<std::unique_ptr<Dense>> Create(
      std::string name, const TensorShape& input, const DenseOptions& options);

  // kernel [in, units] Glorot-uniform, bias [units] zeros.
  std::vector<ParamSpec> Parameters() const override;

 private:
  Dense(std::string name, const TensorShape& input,
        const DenseOptions& options);

  absl::Status RunForward(const ForwardArgs& args) override;
  absl::Status RunBackward(const BackwardArgs& args) override;

  const DenseOptions options_;
};

}  // namespace lockstep

#endif  // LOCKSTEP_WORKER_MODEL_NN_DENSE_H_
