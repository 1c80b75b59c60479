// Keras's BatchNormalization over the last (channel) axis.
//
// Training (ForwardArgs::training): each channel is normalized with the
// batch's mean and variance over N, H and W, and the moving statistics
// (state: moving_mean, moving_variance) move towards them,
//   moving = momentum * moving + (1 - momentum) * batch value.
// Inference: normalized with the moving statistics.
//
// The variance is the biased one (sum of squares / count) both for
// normalizing and for the moving update. That is what Keras 3 does; the
// fused TF2 kernel behind tf.keras 2.x's 4-D BatchNormalization instead
// feeds the unbiased variance (count / (count - 1) times larger) into the
// moving variance. The difference is below 1% once N*H*W exceeds 100 and
// only touches inference-mode outputs.
//
// The backward pass follows the last training forward pass (FAILED_PRECONDITION
// otherwise): gradients flow through the batch statistics. Externally
// synchronized.
#ifndef LOCKSTEP_WORKER_MODEL_NN_BATCH_NORMALIZATION_H_
#define LOCKSTEP_WORKER_MODEL_NN_BATCH_NORMALIZATION_H_

#include <memory>
#include <string>
#include <vector>

#include "absl/status/statusor.h"
#include "worker/model/nn/layer.h"

namespace lockstep {

struct BatchNormOptions {
  float momentum = 0.99f;  // Keras's defaults.
  float epsilon = 1e-3f;
};

class BatchNormalization final : public Layer {
 public:
  static absl::StatusOr<std::unique_ptr<BatchNormalization>> Create(
      std::string name, const TensorShape& input,
      const BatchNormOptions& options);

  // gamma [channels] ones, beta [channels] zeros.
  std::vector<ParamSpec> Parameters() const override;
  // moving_mean [channels] zeros, moving_variance [channels] ones.
  std::vector<ParamSpec> States() const override;

  const BatchNormOptions& options() const { return options_; }

 private:
  BatchNormalization(std::string name, const TensorShape& input,
                     const BatchNormOptions& options);

  absl::Status Allocate() override;
  absl::Status RunForward(const ForwardArgs& args) override;
  absl::Status RunBackward(const BackwardArgs& args) override;

  const BatchNormOptions options_;
  // The last training pass's mean, then 1 / sqrt(variance + epsilon).
  std::unique_ptr<DeviceBuffer> saved_;
  int trained_batch_ = 0;  // Batch of the last training pass; 0: none.
};

}  // namespace lockstep

#endif  // LOCKSTEP_WORKER_MODEL_NN_BATCH_NORMALIZATION_H_
