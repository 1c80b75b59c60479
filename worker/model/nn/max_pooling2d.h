// Keras's MaxPooling2D: the largest value of each channel over a pool_height
// x pool_width window moved by the strides ('valid' or 'same' padding, the
// padding never winning). The forward pass records where each maximum came
// from, and the backward pass routes the gradient there. Externally
// synchronized.
#ifndef LOCKSTEP_WORKER_MODEL_NN_MAX_POOLING2D_H_
#define LOCKSTEP_WORKER_MODEL_NN_MAX_POOLING2D_H_

#include <memory>
#include <string>

#include "absl/status/statusor.h"
#include "worker/device/image_geometry.h"
#include "worker/model/nn/layer.h"
#include "worker/model/nn/window.h"

namespace lockstep {

struct MaxPooling2DOptions {
  int pool_height = 2;
  int pool_width = 2;
  // 0: the pool size, as Keras's strides=None.
  int stride_height = 0;
  int stride_width = 0;
  Padding padding = Padding::kValid;
};

class MaxPooling2D final : public Layer {
 public:
  static absl::StatusOr<std::unique_ptr<MaxPooling2D>> Create(
      std::string name, const TensorShape& input,
      const MaxPooling2DOptions& options);

 private:
  MaxPooling2D(std::string name, const TensorShape& input,
               const WindowGeometry& window);

  absl::Status Allocate() override;
  absl::Status RunForward(const ForwardArgs& args) override;
  absl::Status RunBackward(const BackwardArgs& args) override;

  const WindowGeometry window_;           // batch 0; set per pass.
  std::unique_ptr<DeviceBuffer> argmax_;  // max_batch x output int32.
  int forward_batch_ = 0;  // Batch of the last forward pass; 0: none.
};

}  // namespace lockstep

#endif  // LOCKSTEP_WORKER_MODEL_NN_MAX_POOLING2D_H_
