// Keras's Flatten: an image becomes a 1 x 1 x (height * width * channels)
// vector in NHWC order, which is what Keras's channels_last Flatten gives, so
// a following Dense kernel has Keras's row order. Externally synchronized.
#ifndef LOCKSTEP_WORKER_MODEL_NN_FLATTEN_H_
#define LOCKSTEP_WORKER_MODEL_NN_FLATTEN_H_

#include <memory>
#include <string>

#include "absl/status/statusor.h"
#include "worker/model/nn/layer.h"

namespace lockstep {

class Flatten final : public Layer {
 public:
  static absl::StatusOr<std::unique_ptr<Flatten>> Create(
      std::string name, const TensorShape& input);

 private:
  Flatten(std::string name, const TensorShape& input);

  absl::Status RunForward(const ForwardArgs& args) override;
  absl::Status RunBackward(const BackwardArgs& args) override;
};

}  // namespace lockstep

#endif  // LOCKSTEP_WORKER_MODEL_NN_FLATTEN_H_
