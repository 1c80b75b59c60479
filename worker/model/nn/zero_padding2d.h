// Keras's ZeroPadding2D: rows and columns of zeros around each image.
// Externally synchronized.
#ifndef LOCKSTEP_WORKER_MODEL_NN_ZERO_PADDING2D_H_
#define LOCKSTEP_WORKER_MODEL_NN_ZERO_PADDING2D_H_

#include <memory>
#include <string>

#include "absl/status/statusor.h"
#include "worker/device/image_geometry.h"
#include "worker/model/nn/layer.h"

namespace lockstep {

class ZeroPadding2D final : public Layer {
 public:
  static absl::StatusOr<std::unique_ptr<ZeroPadding2D>> Create(
      std::string name, const TensorShape& input, const Padding2D& padding);

 private:
  ZeroPadding2D(std::string name, const TensorShape& input,
                const TensorShape& output, const Padding2D& padding);

  absl::Status RunForward(const ForwardArgs& args) override;
  absl::Status RunBackward(const BackwardArgs& args) override;

  const Padding2D padding_;
};

}  // namespace lockstep

#endif  // LOCKSTEP_WORKER_MODEL_NN_ZERO_PADDING2D_H_
