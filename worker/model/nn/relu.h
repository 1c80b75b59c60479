// Keras's Activation('relu') / ReLU layer: y = max(x, 0). The backward pass
// masks with the output (y > 0). Externally synchronized.
#ifndef LOCKSTEP_WORKER_MODEL_NN_RELU_H_
#define LOCKSTEP_WORKER_MODEL_NN_RELU_H_

#include <memory>
#include <string>

#include "absl/status/statusor.h"
#include "worker/model/nn/layer.h"

namespace lockstep {

class ReLU final : public Layer {
 public:
  static absl::StatusOr<std::unique_ptr<ReLU>> Create(std::string name,
                                                      const TensorShape& input);

 private:
  ReLU(std::string name, const TensorShape& input);

  absl::Status RunForward(const ForwardArgs& args) override;
  absl::Status RunBackward(const BackwardArgs& args) override;
};

}  // namespace lockstep

#endif  // LOCKSTEP_WORKER_MODEL_NN_RELU_H_
