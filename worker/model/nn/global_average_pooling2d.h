// Keras's GlobalAveragePooling2D: each channel's mean over the image, a
// 1 x 1 x channels output. Externally synchronized.
#ifndef LOCKSTEP_WORKER_MODEL_NN_GLOBAL_AVERAGE_POOLING2D_H_
#define LOCKSTEP_WORKER_MODEL_NN_GLOBAL_AVERAGE_POOLING2D_H_

#include <memory>
#include <string>

#include "absl/status/statusor.h"
#include "worker/model/nn/layer.h"

namespace lockstep {

class GlobalAveragePooling2D final : public Layer {
 public:
  static absl::StatusOr<std::unique_ptr<GlobalAveragePooling2D>> Create(
      std::string name, const TensorShape& input);

 private:
  GlobalAveragePooling2D(std::string name, const TensorShape& input);

  absl::Status RunForward(const ForwardArgs& args) override;
  absl::Status RunBackward(const BackwardArgs& args) override;
};

}  // namespace lockstep

#endif  // LOCKSTEP_WORKER_MODEL_NN_GLOBAL_AVERAGE_POOLING2D_H_
