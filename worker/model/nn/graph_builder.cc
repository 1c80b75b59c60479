#include "worker/model/nn/graph_builder.h"

#include <utility>

#include "absl/strings/str_cat.h"
#include "absl/strings/str_format.h"
#include "worker/model/nn/add.h"
#include "worker/model/nn/flatten.h"
#include "worker/model/nn/global_average_pooling2d.h"
#include "worker/model/nn/relu.h"
#include "worker/model/nn/zero_padding2d.h"

namespace lockstep {
namespace {

// Upcasts a StatusOr of a concrete layer.
template <typename T>
absl::StatusOr<std::unique_ptr<Layer>> AsLayer(
    absl::StatusOr<std::unique_ptr<T>> layer) {
  if (!layer.ok()) return layer.status();
  return std::unique_ptr<Layer>(std::move(layer).value());
}

}  // namespace

GraphBuilder::GraphBuilder(const TensorShape& input) : input_(input) {
  if (input.height < 1 || input.width < 1 || input.channels < 1) {
    status_ = absl::InvalidArgumentError(
        absl::StrCat("graph input shape ", input.ToString(), " is empty"));
  }
}

TensorShape GraphBuilder::shape(int tensor) const {
  if (tensor == 0) return input_;
  if (tensor < 0 || tensor > static_cast<int>(nodes_.size())) {
    return {0, 0, 0};
  }
  return nodes_[tensor - 1].layer->output_shape();
}

bool GraphBuilder::Valid(const std::vector<int>& tensors) {
  if (!status_.ok()) return false;
  for (int t : tensors) {
    if (t < 0 || t > static_cast<int>(nodes_.size())) {
      status_ = absl::InvalidArgumentError(absl::StrFormat(
          "layer %d reads tensor %d, which does not exist", nodes_.size(), t));
      return false;
    }
  }
  return true;
}

int GraphBuilder::Append(absl::StatusOr<std::unique_ptr<Layer>> layer,
                         std::vector<int> inputs) {
  if (!status_.ok()) return -1;
  if (!layer.ok()) {
    status_ = layer.status();
    return -1;
  }
  if (!Valid(inputs)) return -1;
  const Layer& l = **layer;
  if (l.input_shapes().size() != inputs.size()) {
    status_ = absl::InvalidArgumentError(
        absl::StrFormat("layer %s takes %d inputs, given %d", l.name(),
                        l.input_shapes().size(), inputs.size()));
    return -1;
  }
  for (size_t i = 0; i < inputs.size(); ++i) {
    if (l.input_shapes()[i] != shape(inputs[i])) {
      status_ = absl::InvalidArgumentError(absl::StrFormat(
          "layer %s expects input %d of shape %s, tensor %d is %s", l.name(), i,
          l.input_shapes()[i].ToString(), inputs[i],
          shape(inputs[i]).ToString()));
      return -1;
    }
  }
  if (!names_.insert(l.name()).second) {
    status_ = absl::InvalidArgumentError(
        absl::StrCat("two layers are named ", l.name()));
    return -1;
  }
  nodes_.push_back({std::move(layer).value(), std::move(inputs)});
  return static_cast<int>(nodes_.size());
}

int GraphBuilder::Conv2D(std::string name, int x,
                         const Conv2DOptions& options) {
  if (!Valid({x})) return -1;
  return Append(
      AsLayer(lockstep::Conv2D::Create(std::move(name), shape(x), options)),
      {x});
}

int GraphBuilder::BatchNormalization(std::string name, int x,
                                     const BatchNormOptions& options) {
  if (!Valid({x})) return -1;
  return Append(AsLayer(lockstep::BatchNormalization::Create(
                    std::move(name), shape(x), options)),
                {x});
}

int GraphBuilder::ReLU(std::string name, int x) {
  if (!Valid({x})) return -1;
  return Append(AsLayer(lockstep::ReLU::Create(std::move(name), shape(x))),
                {x});
}

int GraphBuilder::MaxPooling2D(std::string name, int x,
                               const MaxPooling2DOptions& options) {
  if (!Valid({x})) return -1;
  return Append(AsLayer(lockstep::MaxPooling2D::Create(std::move(name),
                                                       shape(x), options)),
                {x});
}

int GraphBuilder::ZeroPadding2D(std::string name, int x,
                                const Padding2D& padding) {
  if (!Valid({x})) return -1;
  return Append(AsLayer(lockstep::ZeroPadding2D::Create(std::move(name),
                                                        shape(x), padding)),
                {x});
}

int GraphBuilder::GlobalAveragePooling2D(std::string name, int x) {
  if (!Valid({x})) return -1;
  return Append(AsLayer(lockstep::GlobalAveragePooling2D::Create(
                    std::move(name), shape(x))),
                {x});
}

int GraphBuilder::Add(std::string name, int a, int b) {
  if (!Valid({a, b})) return -1;
  return Append(
      AsLayer(lockstep::Add::Create(std::move(name), shape(a), shape(b))),
      {a, b});
}

int GraphBuilder::Flatten(std::string name, int x) {
  if (!Valid({x})) return -1;
  return Append(AsLayer(lockstep::Flatten::Create(std::move(name), shape(x))),
                {x});
}

int GraphBuilder::Dense(std::string name, int x, const DenseOptions& options) {
  if (!Valid({x})) return -1;
  return Append(
      AsLayer(lockstep::Dense::Create(std::move(name), shape(x), options)),
      {x});
}

absl::StatusOr<Graph> GraphBuilder::Finish(int output) && {
  if (!status_.ok()) return status_;
  if (nodes_.empty() || output != static_cast<int>(nodes_.size())) {
    return absl::InvalidArgumentError(absl::StrFormat(
        "the output must be the last layer's tensor (%d), got %d",
        nodes_.size(), output));
  }
  std::vector<bool> used(nodes_.size() + 1, false);
  for (const GraphNode& node : nodes_) {
    for (int t : node.inputs) used[t] = true;
  }
  for (int t = 0; t < output; ++t) {
    if (!used[t]) {
      return absl::InvalidArgumentError(
          absl::StrCat(t == 0 ? std::string("the input")
                              : absl::StrCat("the output of layer ",
                                             nodes_[t - 1].layer->name()),
                       " feeds no layer"));
    }
  }
  return Graph(input_, std::move(nodes_));
}

}  // namespace lockstep
