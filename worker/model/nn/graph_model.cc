#include "worker/model/nn/graph_model.h"

#include <algorithm>
#include <cmath>
#include <cstring>
#include <utility>

#include "absl/memory/memory.h"
#include "absl/strings/str_format.h"
#include "common/base/random.h"
#include "common/base/status_macros.h"
#include "worker/device/gradient_hand_off.h"

namespace lockstep {
namespace {

// Fills `out` with the tensors' initial values, drawing from `random` for
// the Glorot ones in order.
void Initialize(const std::vector<ParamSpec>& specs, Random& random,
                float* out) {
  for (const ParamSpec& spec : specs) {
    const int64_t n = spec.size();
    switch (spec.initializer) {
      case Initializer::kZeros:
        std::fill(out, out + n, 0.0f);
        break;
      case Initializer::kOnes:
        std::fill(out, out + n, 1.0f);
        break;
      case Initializer::kGlorotUniform: {
        // sqrt is correctly rounded, so the limit is the same everywhere.
        const float limit = static_cast<float>(
            std::sqrt(6.0 / static_cast<double>(spec.fan_in + spec.fan_out)));
        for (int64_t i = 0; i < n; ++i) out[i] = random.Uniform(-limit, limit);
        break;
      }
    }
    out += n;
  }
}

}  // namespace

absl::StatusOr<std::unique_ptr<GraphModel>> GraphModel::Create(Graph graph,
                                                               int max_batch,
                                                               Device* device) {
  if (device == nullptr) {
    return absl::InvalidArgumentError("GraphModel: device is null");
  }
  if (max_batch < 1) {
    return absl::InvalidArgumentError(absl::StrFormat(
        "GraphModel: max_batch must be positive, got %d", max_batch));
  }
  const TensorShape& out = graph.tensor_shape(graph.output());
  if (graph.nodes().empty() || out.height != 1 || out.width != 1) {
    return absl::InvalidArgumentError(absl::StrFormat(
        "GraphModel: the output must be 1x1xclasses logits, got %s",
        out.ToString()));
  }
  for (const GraphNode& node : graph.nodes()) {
    if (node.inputs.size() > 2) {
      return absl::InvalidArgumentError(absl::StrFormat(
          "GraphModel: layer %s has %d inputs; at most 2 are supported",
          node.layer->name(), node.inputs.size()));
    }
  }
  auto model =
      absl::WrapUnique(new GraphModel(std::move(graph), max_batch, device));
  RETURN_IF_ERROR(model->AllocateBuffers());
  RETURN_IF_ERROR(model->SetState(model->InitialState()));
  return model;
}

GraphModel::GraphModel(Graph graph, int max_batch, Device* device)
    : graph_(std::move(graph)), max_batch_(max_batch), device_(device) {
  for (const GraphNode& node : graph_.nodes()) {
    param_offsets_.push_back(num_parameters_);
    state_offsets_.push_back(num_states_);
    num_parameters_ += node.layer->NumParameters();
    num_states_ += node.layer->NumStates();
  }
}

int GraphModel::num_classes() const {
  return graph_.tensor_shape(graph_.output()).channels;
}

int64_t GraphModel::FeatureSize() const { return graph_.input_shape().size(); }

absl::StatusOr<std::unique_ptr<DeviceBuffer>> GraphModel::Allocate(
    size_t bytes) {
  device_bytes_ += static_cast<int64_t>(bytes);
  return device_->Allocate(bytes);
}

absl::Status GraphModel::AllocateBuffers() {
  const size_t batch = static_cast<size_t>(max_batch_);
  const size_t f = sizeof(float);
  ASSIGN_OR_RETURN(weights_, Allocate(num_parameters_ * f));
  ASSIGN_OR_RETURN(gradient_, Allocate(num_parameters_ * f));
  ASSIGN_OR_RETURN(state_, Allocate(num_states_ * f));
  ASSIGN_OR_RETURN(labels_, Allocate(batch * sizeof(int32_t)));
  size_t workspace = 0;
  for (GraphNode& node : graph_.mutable_nodes()) {
    RETURN_IF_ERROR(node.layer->Prepare(device_, max_batch_));
    workspace = std::max(workspace, node.layer->WorkspaceFloats(max_batch_));
  }
  ASSIGN_OR_RETURN(workspace_, Allocate(workspace * f));

  const int tensors = graph_.num_tensors();
  std::vector<int> consumers(tensors, 0);
  for (const GraphNode& node : graph_.nodes()) {
    for (int t : node.inputs) ++consumers[t];
  }
  const std::vector<bool> needs_gradient = graph_.TensorsNeedingGradients();
  size_t scratch = 0;
  for (int t = 0; t < tensors; ++t) {
    const size_t size = batch * graph_.tensor_shape(t).size();
    ASSIGN_OR_RETURN(auto activation, Allocate(size * f));
    activations_.push_back(std::move(activation));
    if (!needs_gradient[t]) {
      gradients_.push_back(nullptr);
      continue;
    }
    ASSIGN_OR_RETURN(auto grad, Allocate(size * f));
    gradients_.push_back(std::move(grad));
    if (consumers[t] > 1) scratch = std::max(scratch, size);
  }
  if (scratch > 0) {
    for (auto& buffer : scratch_) {
      ASSIGN_OR_RETURN(buffer, Allocate(scratch * f));
    }
  }
  uploader_ = std::make_unique<HostUploader>(
      device_, static_cast<size_t>(num_parameters_ + num_states_));
  ASSIGN_OR_RETURN(host_gradient_,
                   GradientHandOff::AllocateStaging(device_, num_parameters_));
  ASSIGN_OR_RETURN(host_state_, device_->AllocateHost(num_states_ * f));
  ASSIGN_OR_RETURN(host_features_,
                   device_->AllocateHost(batch * FeatureSize() * f));
  ASSIGN_OR_RETURN(host_labels_,
                   device_->AllocateHost(batch * sizeof(int32_t)));
  return absl::OkStatus();
}

std::vector<TensorInfo> GraphModel::Tensors() const { return graph_.Tensors(); }

std::vector<TensorInfo> GraphModel::StateTensors() const {
  return graph_.StateTensors();
}

std::vector<float> GraphModel::InitialWeights(uint64_t seed) const {
  std::vector<float> weights(num_parameters_);
  Random random(seed);
  for (size_t i = 0; i < graph_.nodes().size(); ++i) {
    Initialize(graph_.nodes()[i].layer->Parameters(), random,
               weights.data() + param_offsets_[i]);
  }
  return weights;
}

std::vector<float> GraphModel::InitialState() const {
  std::vector<float> state(num_states_);
  Random unused(0);  // State initializers draw nothing.
  for (size_t i = 0; i < graph_.nodes().size(); ++i) {
    Initialize(graph_.nodes()[i].layer->States(), unused,
               state.data() + state_offsets_[i]);
  }
  return state;
}

absl::Status GraphModel::SetWeights(absl::Span<const float> weights) {
  if (static_cast<int64_t>(weights.size()) != num_parameters_) {
    return absl::InvalidArgumentError(absl::StrFormat(
        "GraphModel::SetWeights: got %d values, the model has %d",
        weights.size(), num_parameters_));
  }
  return uploader_->Upload(weights, weights_->data());
}

absl::Status GraphModel::State(absl::Span<float> state) {
  if (static_cast<int64_t>(state.size()) != num_states_) {
    return absl::InvalidArgumentError(
        absl::StrFormat("GraphModel::State: room for %d values, the state "
                        "has %d",
                        state.size(), num_states_));
  }
  const size_t bytes = state.size() * sizeof(float);
  RETURN_IF_ERROR(
      device_->CopyToHost(state_->data(), host_state_->data(), bytes));
  if (bytes > 0) std::memcpy(state.data(), host_state_->data(), bytes);
  return absl::OkStatus();
}

absl::Status GraphModel::SetState(absl::Span<const float> state) {
  if (static_cast<int64_t>(state.size()) != num_states_) {
    return absl::InvalidArgumentError(
        absl::StrFormat("GraphModel::SetState: got %d values, the state has %d",
                        state.size(), num_states_));
  }
  return uploader_->Upload(state, state_->data());
}

absl::Status GraphModel::Forward(absl::Span<const float> features,
                                 absl::Span<const int32_t> labels,
                                 bool training) {
  const int batch = static_cast<int>(labels.size());
  const size_t feature_bytes = features.size() * sizeof(float);
  const size_t label_bytes = labels.size() * sizeof(int32_t);
  std::memcpy(host_features_->data(), features.data(), feature_bytes);
  std::memcpy(host_labels_->data(), labels.data(), label_bytes);
  RETURN_IF_ERROR(device_->CopyToDevice(host_features_->data(), Activation(0),
                                        feature_bytes));
  RETURN_IF_ERROR(device_->CopyToDevice(host_labels_->data(), labels_->data(),
                                        label_bytes));
  std::vector<const float*> inputs;
  for (size_t i = 0; i < graph_.nodes().size(); ++i) {
    GraphNode& node = graph_.mutable_nodes()[i];
    inputs.clear();
    for (int t : node.inputs) inputs.push_back(Activation(t));
    ForwardArgs args;
    args.batch = batch;
    args.inputs = inputs;
    args.output = Activation(static_cast<int>(i) + 1);
    args.params = weights_->As<float>() + param_offsets_[i];
    args.state = state_->As<float>() + state_offsets_[i];
    args.workspace = workspace_->As<float>();
    args.training = training;
    RETURN_IF_ERROR(node.layer->Forward(args));
  }
  return absl::OkStatus();
}

absl::Status GraphModel::Backward(int batch, absl::Span<float> gradient,
                                  const GradientReadyFn& on_ready) {
  const int tensors = graph_.num_tensors();
  // written[t]: gradients_[t] holds a first consumer's contribution.
  std::vector<bool> written(tensors, false);
  written[graph_.output()] = true;
  float* grad = gradient_->As<float>();
  GradientHandOff hand_off(device_, grad, host_gradient_.get(), gradient,
                           on_ready);
  std::vector<const float*> inputs;
  std::vector<float*> input_grads;
  for (size_t i = graph_.nodes().size(); i-- > 0;) {
    GraphNode& node = graph_.mutable_nodes()[i];
    const int out = static_cast<int>(i) + 1;
    // Nothing this node made from needs a gradient (see AllocateBuffers).
    if (gradients_[out] == nullptr) continue;
    inputs.clear();
    input_grads.clear();
    // Slots whose gradient lands in scratch and is added in afterwards.
    int accumulate[2] = {-1, -1};
    for (size_t s = 0; s < node.inputs.size(); ++s) {
      const int t = node.inputs[s];
      inputs.push_back(Activation(t));
      if (gradients_[t] == nullptr) {
        input_grads.push_back(nullptr);
      } else if (!written[t]) {
        input_grads.push_back(gradients_[t]->As<float>());
        written[t] = true;
      } else {
        // A second reader; GraphNodes have at most two inputs (Add).
        input_grads.push_back(scratch_[s]->As<float>());
        accumulate[s] = t;
      }
    }
    BackwardArgs args;
    args.batch = batch;
    args.inputs = inputs;
    args.output = Activation(out);
    args.output_grad = gradients_[out]->As<float>();
    args.input_grads = input_grads;
    args.params = weights_->As<float>() + param_offsets_[i];
    args.param_grads = grad + param_offsets_[i];
    args.workspace = workspace_->As<float>();
    RETURN_IF_ERROR(node.layer->Backward(args));
    for (int s = 0; s < 2; ++s) {
      if (accumulate[s] < 0) continue;
      RETURN_IF_ERROR(
          device_->Axpy(static_cast<size_t>(batch) *
                            graph_.tensor_shape(accumulate[s]).size(),
                        1.0f, scratch_[s]->As<float>(),
                        gradients_[accumulate[s]]->As<float>()));
    }
    const int64_t begin = param_offsets_[i];
    const int64_t count = node.layer->NumParameters();
    RETURN_IF_ERROR(hand_off.Copy(begin, begin + count));
  }
  return hand_off.Finish();
}

absl::StatusOr<BatchStats> GraphModel::ComputeGradients(
    absl::Span<const float> features, absl::Span<const int32_t> labels,
    absl::Span<float> gradient, const GradientReadyFn& on_ready) {
  const size_t rows = labels.size();
  if (rows < 1 || rows > static_cast<size_t>(max_batch_)) {
    return absl::InvalidArgumentError(
        absl::StrFormat("GraphModel::ComputeGradients: %d rows, want 1 to %d",
                        rows, max_batch_));
  }
  if (features.size() != rows * FeatureSize()) {
    return absl::InvalidArgumentError(absl::StrFormat(
        "GraphModel::ComputeGradients: %d feature values for %d rows of %d",
        features.size(), rows, FeatureSize()));
  }
  if (static_cast<int64_t>(gradient.size()) != num_parameters_) {
    return absl::InvalidArgumentError(absl::StrFormat(
        "GraphModel::ComputeGradients: gradient has %d values, the model has "
        "%d",
        gradient.size(), num_parameters_));
  }
  const int n = static_cast<int>(rows);
  // Labels are checked before any layer runs, so a bad batch leaves the
  // batch norm statistics untouched.
  for (size_t r = 0; r < rows; ++r) {
    if (labels[r] < 0 || labels[r] >= num_classes()) {
      return absl::InvalidArgumentError(absl::StrFormat(
          "GraphModel::ComputeGradients: label %d of row %d is outside "
          "[0, %d)",
          labels[r], r, num_classes()));
    }
  }
  RETURN_IF_ERROR(Forward(features, labels, /*training=*/true));
  BatchStats stats;
  stats.examples = n;
  // The gradient of the mean loss: each row's (softmax - onehot) / rows.
  RETURN_IF_ERROR(device_->SoftmaxCrossEntropy(
      n, num_classes(), Activation(graph_.output()), labels_->As<int32_t>(),
      1.0f / n, gradients_[graph_.output()]->As<float>(), &stats.loss_sum,
      &stats.correct));
  RETURN_IF_ERROR(Backward(n, gradient, on_ready));
  return stats;
}

absl::StatusOr<BatchStats> GraphModel::Evaluate(
    absl::Span<const float> features, absl::Span<const int32_t> labels) {
  const size_t rows = labels.size();
  const size_t width = static_cast<size_t>(FeatureSize());
  if (features.size() != rows * width) {
    return absl::InvalidArgumentError(absl::StrFormat(
        "GraphModel::Evaluate: %d feature values for %d rows of %d",
        features.size(), rows, width));
  }
  BatchStats stats;
  for (size_t start = 0; start < rows; start += max_batch_) {
    const size_t piece = std::min<size_t>(max_batch_, rows - start);
    RETURN_IF_ERROR(Forward(features.subspan(start * width, piece * width),
                            labels.subspan(start, piece),
                            /*training=*/false));
    RETURN_IF_ERROR(device_->SoftmaxCrossEntropy(
        static_cast<int>(piece), num_classes(), Activation(graph_.output()),
        labels_->As<int32_t>(), /*grad_scale=*/0.0f, /*grad_logits=*/nullptr,
        &stats.loss_sum, &stats.correct));
  }
  stats.examples = static_cast<int64_t>(rows);
  return stats;
}

}  // namespace lockstep
