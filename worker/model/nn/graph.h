// A network as a directed acyclic graph of layers in topological order:
// tensor 0 is the input batch and node i's layer writes tensor i + 1 from
// the tensors it names as inputs (any earlier ones, so residual connections
// are just a tensor read twice). The last tensor is the output. Built by
// GraphBuilder, run by GraphModel; movable, not copyable, and externally
// synchronized.
#ifndef LOCKSTEP_WORKER_MODEL_NN_GRAPH_H_
#define LOCKSTEP_WORKER_MODEL_NN_GRAPH_H_

#include <cstdint>
#include <memory>
#include <vector>

#include "common/model/model_signature.h"
#include "worker/model/nn/layer.h"

namespace lockstep {

struct GraphNode {
  std::unique_ptr<Layer> layer;
  std::vector<int> inputs;  // Tensor ids, each below this node's output.
};

class Graph final {
 public:
  Graph(TensorShape input, std::vector<GraphNode> nodes);
  Graph(Graph&&) = default;
  Graph& operator=(Graph&&) = default;

  const TensorShape& input_shape() const { return input_; }
  const std::vector<GraphNode>& nodes() const { return nodes_; }
  std::vector<GraphNode>& mutable_nodes() { return nodes_; }
  int num_tensors() const { return static_cast<int>(nodes_.size()) + 1; }
  int output() const { return num_tensors() - 1; }
  const TensorShape& tensor_shape(int tensor) const;

  // The layers' trainable tensors ("<layer>/<param>") in node order, which
  // is the order of the flat parameter vector, and their total size; the
  // same for the state tensors.
  std::vector<TensorInfo> Tensors() const;
  int64_t NumParameters() const;
  std::vector<TensorInfo> StateTensors() const;
  int64_t NumStates() const;

  // Per tensor, whether training needs the loss's gradient with respect to
  // it: when a layer with parameters made it or anything it came from.
  // Nobody needs the input's, nor those of what parameter-free layers make
  // of it (ResNet-50's first ZeroPadding2D). The output's always.
  std::vector<bool> TensorsNeedingGradients() const;

 private:
  TensorShape input_;
  std::vector<GraphNode> nodes_;
};

}  // namespace lockstep

#endif  // LOCKSTEP_WORKER_MODEL_NN_GRAPH_H_
