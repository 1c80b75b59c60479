// A Model computed by a Graph of layers on a Device, ending in softmax
// cross-entropy over the graph's output (1 x 1 x classes logits).
//
// GraphModel owns the graph and, sized for max_batch examples at Create (a
// step allocates nothing): the flat weights, gradient and state on the
// device, every tensor's activation and gradient, the layers' shared
// workspace, and host staging buffers from Device::AllocateHost through
// which weights, batches, gradients and state cross. The Device is not
// owned.
//
// Backward runs the nodes in reverse. A tensor read by several layers (a
// residual block's input) gets the sum of their gradients: the first writes
// it, the others write to a scratch buffer that is then added in. Each
// layer's parameter gradient starts its copy to the host as soon as it is
// computed, and `on_ready` hears of it per layer, last layer first.
//
// State: the moving statistics of the BatchNormalization layers, which each
// training step updates from the worker's own batch (like MirroredStrategy's
// default, statistics are not synchronized within a step). Create sets them
// to InitialState(). Externally synchronized.
#ifndef LOCKSTEP_WORKER_MODEL_NN_GRAPH_MODEL_H_
#define LOCKSTEP_WORKER_MODEL_NN_GRAPH_MODEL_H_

#include <cstdint>
#include <memory>
#include <vector>

#include "absl/status/statusor.h"
#include "absl/types/span.h"
#include "common/model/model_signature.h"
#include "worker/device/device.h"
#include "worker/device/host_uploader.h"
#include "worker/model/model.h"
#include "worker/model/nn/graph.h"

namespace lockstep {

class GraphModel final : public Model {
 public:
  // INVALID_ARGUMENT when the graph's output is not 1 x 1 x classes, or
  // max_batch < 1; RESOURCE_EXHAUSTED when the buffers do not fit.
  static absl::StatusOr<std::unique_ptr<GraphModel>> Create(Graph graph,
                                                            int max_batch,
                                                            Device* device);

  std::vector<TensorInfo> Tensors() const override;
  int64_t NumParameters() const override { return num_parameters_; }
  int64_t FeatureSize() const override;
  int max_batch() const override { return max_batch_; }
  std::vector<float> InitialWeights(uint64_t seed) const override;
  absl::Status SetWeights(absl::Span<const float> weights) override;
  absl::StatusOr<absl::Span<float>> HostWeightBuffer() override {
    return uploader_->Lend();
  }
  absl::StatusOr<BatchStats> ComputeGradients(
      absl::Span<const float> features, absl::Span<const int32_t> labels,
      absl::Span<float> gradient,
      const GradientReadyFn& on_ready = nullptr) override;
  absl::StatusOr<BatchStats> Evaluate(
      absl::Span<const float> features,
      absl::Span<const int32_t> labels) override;
  std::vector<TensorInfo> StateTensors() const override;
  int64_t StateSize() const override { return num_states_; }
  std::vector<float> InitialState() const override;
  absl::Status State(absl::Span<float> state) override;
  absl::Status SetState(absl::Span<const float> state) override;

  const Graph& graph() const { return graph_; }
  int num_classes() const;
  // Bytes of device memory in the model's own buffers (weights, gradients,
  // state, activations and their gradients, workspace); the layers' small
  // buffers (arg-max indices, batch statistics) are not counted.
  int64_t DeviceBytes() const { return device_bytes_; }

 private:
  GraphModel(Graph graph, int max_batch, Device* device);

  absl::Status AllocateBuffers();
  absl::StatusOr<std::unique_ptr<DeviceBuffer>> Allocate(size_t bytes);
  // Uploads `labels.size()` rows and runs every layer; the logits land in
  // the output tensor's activation.
  absl::Status Forward(absl::Span<const float> features,
                       absl::Span<const int32_t> labels, bool training);
  absl::Status Backward(int batch, absl::Span<float> gradient,
                        const GradientReadyFn& on_ready);
  float* Activation(int tensor) { return activations_[tensor]->As<float>(); }

  Graph graph_;
  const int max_batch_;
  Device* const device_;  // Not owned.
  int64_t num_parameters_ = 0;
  int64_t num_states_ = 0;
  // Where each node's parameters and state start in the flat vectors.
  std::vector<int64_t> param_offsets_;
  std::vector<int64_t> state_offsets_;
  int64_t device_bytes_ = 0;

  std::unique_ptr<DeviceBuffer> weights_;
  std::unique_ptr<DeviceBuffer> gradient_;
  std::unique_ptr<DeviceBuffer> state_;
  std::unique_ptr<DeviceBuffer> labels_;
  std::unique_ptr<DeviceBuffer> workspace_;
  // Per tensor, max_batch examples: activations_[0] is the input batch;
  // gradients_[t] the loss's gradient with respect to tensor t (none for
  // the input, nor where no parameter lies upstream).
  std::vector<std::unique_ptr<DeviceBuffer>> activations_;
  std::vector<std::unique_ptr<DeviceBuffer>> gradients_;
  // Where a second consumer of a tensor writes its gradient before it is
  // added in; one per input slot (Add reads two). Null when no tensor has two
  // consumers.
  std::unique_ptr<DeviceBuffer> scratch_[2];

  std::unique_ptr<HostUploader> uploader_;       // Weights and state.
  std::unique_ptr<DeviceBuffer> host_gradient_;  // Null on the CPU device.
  std::unique_ptr<DeviceBuffer> host_state_;     // State() downloads here.
  std::unique_ptr<DeviceBuffer> host_features_;
  std::unique_ptr<DeviceBuffer> host_labels_;
};

}  // namespace lockstep

#endif  // LOCKSTEP_WORKER_MODEL_NN_GRAPH_MODEL_H_
