#include "worker/model/mlp.h"

#include <string>
#include <utility>

#include "absl/strings/str_cat.h"
#include "absl/strings/str_format.h"
#include "common/base/status_macros.h"
#include "worker/model/nn/graph_builder.h"

namespace lockstep {

absl::StatusOr<Graph> MlpGraph(const std::vector<int>& layer_sizes) {
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
  GraphBuilder b({1, 1, layer_sizes[0]});
  int x = b.input();
  const size_t layers = layer_sizes.size() - 1;
  for (size_t i = 0; i < layers; ++i) {
    DenseOptions dense;
    dense.units = layer_sizes[i + 1];
    x = b.Dense(absl::StrCat("dense_", i), x, dense);
    if (i + 1 < layers) x = b.ReLU(absl::StrCat("relu_", i), x);
  }
  return std::move(b).Finish(x);
}

absl::StatusOr<std::unique_ptr<GraphModel>> CreateMlp(
    const std::vector<int>& layer_sizes, int max_batch, Device* device) {
  if (device == nullptr) {
    return absl::InvalidArgumentError("Mlp: device is null");
  }
  ASSIGN_OR_RETURN(Graph graph, MlpGraph(layer_sizes));
  return GraphModel::Create(std::move(graph), max_batch, device);
}

}  // namespace lockstep
