// Builds a Graph the way Keras's functional API reads:
//
//   GraphBuilder b({32, 32, 3});
//   int x = b.Conv2D("conv1", b.input(), conv_options);
//   x = b.BatchNormalization("conv1_bn", x);
//   int y = b.ReLU("conv1_relu", x);
//   ...
//   int z = b.Add("block1_add", shortcut, y);
//   absl::StatusOr<Graph> graph = std::move(b).Finish(logits);
//
// Each call appends one layer and returns its output tensor. The first error
// (a bad option, mismatched shapes, a repeated name) is kept and returned by
// Finish; calls after it, and calls given the -1 a failed call returned, do
// nothing and return -1, so a model is written without a check per line.
// Not thread-safe.
#ifndef LOCKSTEP_WORKER_MODEL_NN_GRAPH_BUILDER_H_
#define LOCKSTEP_WORKER_MODEL_NN_GRAPH_BUILDER_H_

#include <memory>
#include <set>
#include <string>
#include <vector>

#include "absl/status/status.h"
#include "absl/status/statusor.h"
#include "worker/device/image_geometry.h"
#include "worker/model/nn/batch_normalization.h"
#include "worker/model/nn/conv2d.h"
#include "worker/model/nn/dense.h"
#include "worker/model/nn/graph.h"
#include "worker/model/nn/layer.h"
#include "worker/model/nn/max_pooling2d.h"

namespace lockstep {

class GraphBuilder final {
 public:
  explicit GraphBuilder(const TensorShape& input);

  int input() const { return 0; }
  // The shape of `tensor`; 0x0x0 for an id that is not a tensor.
  TensorShape shape(int tensor) const;
  const absl::Status& status() const { return status_; }

  int Conv2D(std::string name, int x, const Conv2DOptions& options);
  int BatchNormalization(std::string name, int x,
                         const BatchNormOptions& options = {});
  int ReLU(std::string name, int x);
  int MaxPooling2D(std::string name, int x, const MaxPooling2DOptions& options);
  int ZeroPadding2D(std::string name, int x, const Padding2D& padding);
  int GlobalAveragePooling2D(std::string name, int x);
  int Add(std::string name, int a, int b);
  int Flatten(std::string name, int x);
  int Dense(std::string name, int x, const DenseOptions& options);

  // Any layer made from the shapes of `inputs` (as the calls above do).
  int Append(absl::StatusOr<std::unique_ptr<Layer>> layer,
             std::vector<int> inputs);

  // The graph with `output` as its output, which must be the last layer's
  // tensor; every other tensor, the input included, must feed some layer.
  // INVALID_ARGUMENT otherwise, or with the first error of the calls.
  absl::StatusOr<Graph> Finish(int output) &&;

 private:
  // False (recording an error the first time) unless every id is a tensor.
  bool Valid(const std::vector<int>& tensors);

  TensorShape input_;
  std::vector<GraphNode> nodes_;
  std::set<std::string> names_;
  absl::Status status_;
};

}  // namespace lockstep

#endif  // LOCKSTEP_WORKER_MODEL_NN_GRAPH_BUILDER_H_
