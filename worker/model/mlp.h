// A multi-layer perceptron (Dense -> ReLU -> ... -> Dense -> softmax
// cross-entropy), the tutorial's model, computed on a Device.
//
// Parameters form one flat fp32 vector in signature order:
//   dense_0/kernel [in, out] (row-major), dense_0/bias [out], dense_1/kernel,
//   ... -- the same names and shapes as Keras's Dense layers.
// Mlp owns its device buffers (weights, activations, gradients) sized for
// batches of up to max_batch rows, and host staging buffers from
// Device::AllocateHost (pinned on CUDA) through which weights, batches and
// gradients cross; the Device is not owned. It has no state (StateSize() is
// 0). Externally synchronized.
#ifndef LOCKSTEP_WORKER_MODEL_MLP_H_
#define LOCKSTEP_WORKER_MODEL_MLP_H_

#include <cstdint>
#include <memory>
#include <vector>

#include "absl/status/statusor.h"
#include "absl/types/span.h"
#include "common/model_signature.h"
#include "worker/device/device.h"
#include "worker/device/host_uploader.h"
#include "worker/model/model.h"

namespace lockstep {

class Mlp final : public Model {
 public:
  // `layer_sizes` has at least two entries, all positive (e.g. {784,128,10}).
  static absl::StatusOr<std::unique_ptr<Mlp>> Create(
      std::vector<int> layer_sizes, int max_batch, Device* device);

  std::vector<TensorInfo> Tensors() const override;
  int64_t NumParameters() const override;
  int64_t FeatureSize() const override { return layer_sizes_[0]; }
  const std::vector<int>& layer_sizes() const { return layer_sizes_; }
  int max_batch() const override { return max_batch_; }

  // Keras's default initialization drawn from `seed`: kernels Glorot-uniform
  // in [-l, l] with l = sqrt(6 / (fan_in + fan_out)), biases zero. The same
  // seed gives the same bits on every machine (no std distributions).
  std::vector<float> InitialWeights(uint64_t seed) const override;

  // Uploads the flat weights (NumParameters() values) through the pinned
  // staging buffer.
  absl::Status SetWeights(absl::Span<const float> weights) override;
  absl::StatusOr<absl::Span<float>> HostWeightBuffer() override {
    return uploader_->Lend();
  }

  // Forward and backward on one batch: `features` is rows x layer_sizes[0]
  // (row-major), `labels` has rows entries, 1 <= rows <= max_batch. Writes
  // the gradient of the mean loss over the batch into `gradient` (flat,
  // NumParameters() values, on the host). Each layer's gradient starts its
  // copy to the host as soon as backprop has it (last layer first), while
  // the layers below are still being computed. When `on_ready` is given, it
  // is called with [begin, end) as soon as that range of `gradient` is final
  // (one layer at a time, last layer first), so the caller can send it while
  // backprop goes on.
  absl::StatusOr<BatchStats> ComputeGradients(
      absl::Span<const float> features, absl::Span<const int32_t> labels,
      absl::Span<float> gradient,
      const GradientReadyFn& on_ready = nullptr) override;

  // Forward only, over any number of rows (split into max_batch pieces).
  absl::StatusOr<BatchStats> Evaluate(
      absl::Span<const float> features,
      absl::Span<const int32_t> labels) override;

  // No state: empty, and only empty spans are accepted.
  std::vector<TensorInfo> StateTensors() const override { return {}; }
  int64_t StateSize() const override { return 0; }
  std::vector<float> InitialState() const override { return {}; }
  absl::Status State(absl::Span<float> state) override;
  absl::Status SetState(absl::Span<const float> state) override;

 private:
  // Where one Dense layer's tensors sit in the flat parameter vector.
  struct Layer {
    int in = 0;
    int out = 0;
    int64_t kernel_offset = 0;  // In floats; the bias follows the kernel.
    int64_t bias_offset = 0;
  };

  Mlp(std::vector<int> layer_sizes, int max_batch, Device* device);

  absl::Status AllocateBuffers();
  // Uploads `labels.size()` rows (through the staging buffers) and runs the
  // layers up to the logits, which land in activations_.back().
  absl::Status Forward(absl::Span<const float> features,
                       absl::Span<const int32_t> labels);

  const std::vector<int> layer_sizes_;
  const int max_batch_;
  Device* const device_;  // Not owned.
  std::vector<Layer> layers_;
  int64_t num_parameters_ = 0;

  // All buffers are sized for max_batch rows at Create, so a step allocates
  // nothing.
  std::unique_ptr<DeviceBuffer> weights_;   // Flat, signature order.
  std::unique_ptr<DeviceBuffer> gradient_;  // Flat, signature order.
  std::unique_ptr<DeviceBuffer> labels_;    // max_batch int32.
  // activations_[0] is the input batch, activations_[i + 1] layer i's output
  // (after ReLU for hidden layers; the logits for the last). Backward reads
  // them, so they are kept rather than overwritten in place.
  std::vector<std::unique_ptr<DeviceBuffer>> activations_;
  // Two max_batch x widest-layer buffers that take turns holding the
  // gradient with respect to the current layer's output and its input.
  std::unique_ptr<DeviceBuffer> delta_a_;
  std::unique_ptr<DeviceBuffer> delta_b_;
  std::unique_ptr<HostUploader> uploader_;  // Weights.
  // Host staging (Device::AllocateHost), same sizes as their device twins.
  std::unique_ptr<DeviceBuffer> host_gradient_;  // Null on the CPU device.
  std::unique_ptr<DeviceBuffer> host_features_;  // max_batch x inputs.
  std::unique_ptr<DeviceBuffer> host_labels_;
};

}  // namespace lockstep

#endif  // LOCKSTEP_WORKER_MODEL_MLP_H_
