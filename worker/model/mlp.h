// A multi-layer perceptron (Dense -> ReLU -> ... -> Dense -> softmax
// cross-entropy), the tutorial's model, as a GraphModel of nn/ layers.
//
// Parameters form one flat fp32 vector in signature order:
//   dense_0/kernel [in, out] (row-major), dense_0/bias [out], dense_1/kernel,
//   ... -- the same names and shapes as Keras's Dense layers. The input is a
//   1 x 1 x layer_sizes[0] tensor per example (a flattened row), so the
//   features of a batch are rows x layer_sizes[0], row-major. Kernels start
//   Glorot-uniform and biases zero (Keras's defaults); the model has no
//   state.
#ifndef LOCKSTEP_WORKER_MODEL_MLP_H_
#define LOCKSTEP_WORKER_MODEL_MLP_H_

#include <memory>
#include <vector>

#include "absl/status/statusor.h"
#include "worker/device/device.h"
#include "worker/model/nn/graph.h"
#include "worker/model/nn/graph_model.h"

namespace lockstep {

// The layers of the MLP with these widths: Dense "dense_i" of
// layer_sizes[i + 1] units over the previous tensor, each but the last
// followed by ReLU "relu_i". INVALID_ARGUMENT unless there are at least two
// sizes (input and output), all positive.
absl::StatusOr<Graph> MlpGraph(const std::vector<int>& layer_sizes);

// MlpGraph(layer_sizes) on `device` (not owned) for batches of up to
// `max_batch` rows.
absl::StatusOr<std::unique_ptr<GraphModel>> CreateMlp(
    const std::vector<int>& layer_sizes, int max_batch, Device* device);

}  // namespace lockstep

#endif  // LOCKSTEP_WORKER_MODEL_MLP_H_
