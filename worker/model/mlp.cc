#include "worker/model/mlp.h"

#include <algorithm>
#include <cmath>
#include <cstring>
#include <string>
#include <utility>

#include "absl/memory/memory.h"
#include "absl/strings/str_cat.h"
#include "absl/strings/str_format.h"
#include "common/random.h"
#include "common/status_macros.h"
#include "worker/device/gradient_hand_off.h"

namespace lockstep {

absl::StatusOr<std::unique_ptr<Mlp>> Mlp::Create(std::vector<int> layer_sizes,
                                                 int max_batch,
                                                 Device* device) {
  if (device == nullptr) {
    return absl::InvalidArgumentError("Mlp: device is null");
  }
  if (layer_sizes.size() < 2) {
    return absl::InvalidArgumentError(absl::StrFormat(
        "Mlp: need at least two layer sizes (input and output), got %d",
        layer_sizes.size()));
  }
  for (int size : layer_sizes) {
    if (size < 1) {
      return absl::InvalidArgumentError(
          absl::StrCat("Mlp: layer sizes must be positive, got ", size));
    }
  }
  if (max_batch < 1) {
    return absl::InvalidArgumentError(
        absl::StrCat("Mlp: max_batch must be positive, got ", max_batch));
  }
  auto mlp =
      absl::WrapUnique(new Mlp(std::move(layer_sizes), max_batch, device));
  RETURN_IF_ERROR(mlp->AllocateBuffers());
  return mlp;
}

Mlp::Mlp(std::vector<int> layer_sizes, int max_batch, Device* device)
    : layer_sizes_(std::move(layer_sizes)),
      max_batch_(max_batch),
      device_(device) {
  int64_t offset = 0;
  for (size_t i = 0; i + 1 < layer_sizes_.size(); ++i) {
    Layer layer;
    layer.in = layer_sizes_[i];
    layer.out = layer_sizes_[i + 1];
    layer.kernel_offset = offset;
    layer.bias_offset = offset + int64_t{layer.in} * layer.out;
    offset = layer.bias_offset + layer.out;
    layers_.push_back(layer);
  }
  num_parameters_ = offset;
}

absl::Status Mlp::AllocateBuffers() {
  const size_t batch = static_cast<size_t>(max_batch_);
  const size_t params = static_cast<size_t>(num_parameters_);
  ASSIGN_OR_RETURN(weights_, device_->Allocate(params * sizeof(float)));
  ASSIGN_OR_RETURN(gradient_, device_->Allocate(params * sizeof(float)));
  ASSIGN_OR_RETURN(labels_, device_->Allocate(batch * sizeof(int32_t)));
  for (int size : layer_sizes_) {
    ASSIGN_OR_RETURN(auto buffer,
                     device_->Allocate(batch * size * sizeof(float)));
    activations_.push_back(std::move(buffer));
  }
  // The deltas are the gradients w.r.t. every layer's output; the input
  // layer needs none.
  const size_t widest =
      *std::max_element(layer_sizes_.begin() + 1, layer_sizes_.end());
  ASSIGN_OR_RETURN(delta_a_, device_->Allocate(batch * widest * sizeof(float)));
  ASSIGN_OR_RETURN(delta_b_, device_->Allocate(batch * widest * sizeof(float)));
  uploader_ = std::make_unique<HostUploader>(device_, params);
  ASSIGN_OR_RETURN(host_gradient_,
                   GradientHandOff::AllocateStaging(device_, params));
  ASSIGN_OR_RETURN(
      host_features_,
      device_->AllocateHost(batch * layer_sizes_[0] * sizeof(float)));
  ASSIGN_OR_RETURN(host_labels_,
                   device_->AllocateHost(batch * sizeof(int32_t)));
  return absl::OkStatus();
}

std::vector<TensorInfo> Mlp::Tensors() const {
  std::vector<TensorInfo> tensors;
  for (size_t i = 0; i < layers_.size(); ++i) {
    const std::string prefix = absl::StrCat("dense_", i);
    tensors.push_back(
        {absl::StrCat(prefix, "/kernel"), {layers_[i].in, layers_[i].out}});
    tensors.push_back({absl::StrCat(prefix, "/bias"), {layers_[i].out}});
  }
  return tensors;
}

int64_t Mlp::NumParameters() const { return num_parameters_; }

std::vector<float> Mlp::InitialWeights(uint64_t seed) const {
  std::vector<float> weights(num_parameters_, 0.0f);
  Random random(seed);
  for (const Layer& layer : layers_) {
    // sqrt is correctly rounded in IEEE arithmetic, so the limit -- like the
    // draws -- is the same on every machine.
    const float limit =
        static_cast<float>(std::sqrt(6.0 / (layer.in + layer.out)));
    float* kernel = weights.data() + layer.kernel_offset;
    const int64_t n = int64_t{layer.in} * layer.out;
    for (int64_t j = 0; j < n; ++j) kernel[j] = random.Uniform(-limit, limit);
  }
  return weights;
}

absl::Status Mlp::SetWeights(absl::Span<const float> weights) {
  if (static_cast<int64_t>(weights.size()) != num_parameters_) {
    return absl::InvalidArgumentError(
        absl::StrFormat("Mlp::SetWeights: got %d values, the model has %d",
                        weights.size(), num_parameters_));
  }
  return uploader_->Upload(weights, weights_->data());
}

absl::Status Mlp::State(absl::Span<float> state) {
  if (!state.empty()) {
    return absl::InvalidArgumentError(absl::StrFormat(
        "Mlp::State: the model has no state, got room for %d values",
        state.size()));
  }
  return absl::OkStatus();
}

absl::Status Mlp::SetState(absl::Span<const float> state) {
  if (!state.empty()) {
    return absl::InvalidArgumentError(absl::StrFormat(
        "Mlp::SetState: the model has no state, got %d values", state.size()));
  }
  return absl::OkStatus();
}

absl::Status Mlp::Forward(absl::Span<const float> features,
                          absl::Span<const int32_t> labels) {
  const int rows = static_cast<int>(labels.size());
  const size_t feature_bytes = features.size() * sizeof(float);
  const size_t label_bytes = labels.size() * sizeof(int32_t);
  if (rows > 0) {
    std::memcpy(host_features_->data(), features.data(), feature_bytes);
    std::memcpy(host_labels_->data(), labels.data(), label_bytes);
  }
  RETURN_IF_ERROR(device_->CopyToDevice(
      host_features_->data(), activations_[0]->data(), feature_bytes));
  RETURN_IF_ERROR(device_->CopyToDevice(host_labels_->data(), labels_->data(),
                                        label_bytes));
  const float* params = weights_->As<float>();
  for (size_t i = 0; i < layers_.size(); ++i) {
    const Layer& layer = layers_[i];
    float* out = activations_[i + 1]->As<float>();
    RETURN_IF_ERROR(device_->Gemm(
        /*trans_a=*/false, /*trans_b=*/false, rows, layer.out, layer.in,
        /*alpha=*/1.0f, activations_[i]->As<float>(),
        params + layer.kernel_offset, /*beta=*/0.0f, out));
    RETURN_IF_ERROR(
        device_->AddBias(rows, layer.out, params + layer.bias_offset, out));
    if (i + 1 < layers_.size()) {
      RETURN_IF_ERROR(
          device_->ReluForward(static_cast<size_t>(rows) * layer.out, out));
    }
  }
  return absl::OkStatus();
}

absl::StatusOr<BatchStats> Mlp::ComputeGradients(
    absl::Span<const float> features, absl::Span<const int32_t> labels,
    absl::Span<float> gradient, const GradientReadyFn& on_ready) {
  const size_t rows = labels.size();
  if (rows < 1 || rows > static_cast<size_t>(max_batch_)) {
    return absl::InvalidArgumentError(absl::StrFormat(
        "Mlp::ComputeGradients: %d rows, want 1 to %d", rows, max_batch_));
  }
  if (features.size() != rows * layer_sizes_[0]) {
    return absl::InvalidArgumentError(absl::StrFormat(
        "Mlp::ComputeGradients: %d feature values for %d rows of %d",
        features.size(), rows, layer_sizes_[0]));
  }
  if (static_cast<int64_t>(gradient.size()) != num_parameters_) {
    return absl::InvalidArgumentError(absl::StrFormat(
        "Mlp::ComputeGradients: gradient has %d values, the model has %d",
        gradient.size(), num_parameters_));
  }
  RETURN_IF_ERROR(Forward(features, labels));

  const int n = static_cast<int>(rows);
  BatchStats stats;
  stats.examples = n;
  float* delta = delta_a_->As<float>();
  float* next_delta = delta_b_->As<float>();
  // The gradient of the mean loss: each row's (softmax - onehot) / rows.
  RETURN_IF_ERROR(device_->SoftmaxCrossEntropy(
      n, layers_.back().out, activations_.back()->As<float>(),
      labels_->As<int32_t>(), 1.0f / n, delta, &stats.loss_sum,
      &stats.correct));

  const float* params = weights_->As<float>();
  float* grad = gradient_->As<float>();
  GradientHandOff hand_off(device_, grad, host_gradient_.get(), gradient,
                           on_ready);
  // Last layer first: its gradient is ready earliest, and each layer's piece
  // starts its copy to the host as soon as it is done, overlapping the
  // layers below (on CUDA the copy runs on its own stream).
  for (size_t i = layers_.size(); i-- > 0;) {
    const Layer& layer = layers_[i];
    const float* input = activations_[i]->As<float>();
    // dW = input^T . delta, db = column sums of delta.
    RETURN_IF_ERROR(device_->Gemm(
        /*trans_a=*/true, /*trans_b=*/false, layer.in, layer.out, n,
        /*alpha=*/1.0f, input, delta, /*beta=*/0.0f,
        grad + layer.kernel_offset));
    RETURN_IF_ERROR(
        device_->BiasGradient(n, layer.out, delta, grad + layer.bias_offset));
    const int64_t count = int64_t{layer.in} * layer.out + layer.out;
    RETURN_IF_ERROR(
        hand_off.Copy(layer.kernel_offset, layer.kernel_offset + count));
    // Nobody needs the gradient w.r.t. the features (i == 0).
    if (i > 0) {
      // delta for the layer below = (delta . W^T) masked where ReLU was off.
      RETURN_IF_ERROR(device_->Gemm(
          /*trans_a=*/false, /*trans_b=*/true, n, layer.in, layer.out,
          /*alpha=*/1.0f, delta, params + layer.kernel_offset, /*beta=*/0.0f,
          next_delta));
      RETURN_IF_ERROR(device_->ReluBackward(static_cast<size_t>(n) * layer.in,
                                            input, next_delta));
      std::swap(delta, next_delta);
    }
  }
  RETURN_IF_ERROR(hand_off.Finish());
  return stats;
}

absl::StatusOr<BatchStats> Mlp::Evaluate(absl::Span<const float> features,
                                         absl::Span<const int32_t> labels) {
  const size_t rows = labels.size();
  const size_t width = layer_sizes_[0];
  if (features.size() != rows * width) {
    return absl::InvalidArgumentError(
        absl::StrFormat("Mlp::Evaluate: %d feature values for %d rows of %d",
                        features.size(), rows, width));
  }
  BatchStats stats;
  for (size_t start = 0; start < rows; start += max_batch_) {
    const size_t piece = std::min<size_t>(max_batch_, rows - start);
    RETURN_IF_ERROR(Forward(features.subspan(start * width, piece * width),
                            labels.subspan(start, piece)));
    RETURN_IF_ERROR(device_->SoftmaxCrossEntropy(
        static_cast<int>(piece), layers_.back().out,
        activations_.back()->As<float>(), labels_->As<int32_t>(),
        /*grad_scale=*/0.0f, /*grad_logits=*/nullptr, &stats.loss_sum,
        &stats.correct));
  }
  stats.examples = static_cast<int64_t>(rows);
  return stats;
}

}  // namespace lockstep
