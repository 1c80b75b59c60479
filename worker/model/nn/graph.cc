#include "worker/model/nn/graph.h"

#include <utility>

#include "absl/strings/str_cat.h"

namespace lockstep {
namespace {

std::vector<TensorInfo> Named(const Layer& layer,
                              const std::vector<ParamSpec>& specs) {
  std::vector<TensorInfo> tensors;
  for (const ParamSpec& spec : specs) {
    tensors.push_back({absl::StrCat(layer.name(), "/", spec.name), spec.shape});
  }
  return tensors;
}

}  // namespace

Graph::Graph(TensorShape input, std::vector<GraphNode> nodes)
    : input_(input), nodes_(std::move(nodes)) {}

const TensorShape& Graph::tensor_shape(int tensor) const {
  return tensor == 0 ? input_ : nodes_[tensor - 1].layer->output_shape();
}

std::vector<TensorInfo> Graph::Tensors() const {
  std::vector<TensorInfo> tensors;
  for (const GraphNode& node : nodes_) {
    for (TensorInfo& t : Named(*node.layer, node.layer->Parameters())) {
      tensors.push_back(std::move(t));
    }
  }
  return tensors;
}

int64_t Graph::NumParameters() const {
  int64_t n = 0;
  for (const GraphNode& node : nodes_) n += node.layer->NumParameters();
  return n;
}

std::vector<TensorInfo> Graph::StateTensors() const {
  std::vector<TensorInfo> tensors;
  for (const GraphNode& node : nodes_) {
    for (TensorInfo& t : Named(*node.layer, node.layer->States())) {
      tensors.push_back(std::move(t));
    }
  }
  return tensors;
}

int64_t Graph::NumStates() const {
  int64_t n = 0;
  for (const GraphNode& node : nodes_) n += node.layer->NumStates();
  return n;
}

std::vector<bool> Graph::TensorsNeedingGradients() const {
  std::vector<bool> needed(num_tensors(), false);
  for (size_t i = 0; i < nodes_.size(); ++i) {
    bool made_from_parameters = nodes_[i].layer->NumParameters() > 0;
    for (int t : nodes_[i].inputs) {
      made_from_parameters = made_from_parameters || needed[t];
    }
    needed[i + 1] = made_from_parameters;
  }
  needed[output()] = true;  // The loss writes it.
  return needed;
}

}  // namespace lockstep
