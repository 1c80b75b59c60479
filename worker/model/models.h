// The models a worker can train, by name:
//
//   mlp       Dense -> ReLU -> ... -> Dense over the flattened input
//             (worker/model/mlp.h; hidden widths from
//             ModelSpec::hidden_units).
//   cnn       A small LeNet-style network for fast tests: Conv 5x5x6 -> ReLU
//             -> MaxPool 2 -> Conv 5x5x16 -> ReLU -> MaxPool 2 -> Flatten ->
//             Dense 120 -> ReLU -> Dense 84 -> ReLU -> Dense classes; 'valid'
//             padding, no batch norm (so W workers x batch B equals one
//             worker x batch W*B exactly). Inputs of at least 16x16.
//   resnet20  The CIFAR ResNet v1 of He et al. (2016) as in Keras's
//             cifar10_resnet example: a 3x3x16 conv, then 3 stages of 3
//             basic blocks (two 3x3 convs with batch norm) with 16, 32 and 64
//             filters, a 1x1 projection shortcut (no batch norm) where a
//             stage halves the size, global average pooling and Dense
//             classes. Convolutions have biases (Keras's default), batch
//             norm Keras's defaults (momentum 0.99, epsilon 1e-3). For 10
//             classes: 273,066 trainable parameters + 1,376 moving
//             statistics = 274,442 in all, Keras's count.
//   resnet50  keras.applications.ResNet50(weights=None, classes=...): conv1
//             7x7/2 after ZeroPadding 3, batch norm, ReLU, ZeroPadding 1 +
//             MaxPool 3x3/2, bottleneck stages of [3, 4, 6, 3] blocks (64,
//             128, 256, 512 filters; 4x as many out), projection shortcuts
//             in each stage's first block, stride 2 on its first 1x1 conv
//             from stage 3 on, biases in every conv, batch norm epsilon
//             1.001e-5, then global average pooling and Dense classes
//             (include_top with a softmax-free head). Keras's layer names
//             and order. For 10 classes: 23,555,082 trainable parameters +
//             53,120 moving statistics = 23,608,202, as Keras counts.
//
// Image models take NHWC float images of ModelSpec::input; the final
// softmax is part of the loss (Device::SoftmaxCrossEntropy).
#ifndef LOCKSTEP_WORKER_MODEL_MODELS_H_
#define LOCKSTEP_WORKER_MODEL_MODELS_H_

#include <cstdint>
#include <memory>
#include <string>
#include <vector>

#include "absl/status/statusor.h"
#include "worker/device/device.h"
#include "worker/model/model.h"
#include "worker/model/nn/graph.h"
#include "worker/model/nn/layer.h"

namespace lockstep {

struct ModelSpec {
  std::string name = "mlp";
  TensorShape input = {28, 28, 1};  // One example; the MLP flattens it.
  int num_classes = 10;
  // mlp only: the widths between input and output, so --layers=784,128,10
  // is input 784 (1x1x784 or 28x28x1), hidden_units {128}, 10 classes.
  std::vector<int> hidden_units = {128};
  // Image models: the bound on each Conv2D's im2col workspace, in floats
  // (Conv2DOptions::workspace_limit_floats). 0 means the device's choice
  // (ConvWorkspaceFloatsFor in device_factory.h) in CreateModel and the
  // layer's default in BuildModelGraph.
  int64_t conv_workspace_floats = 0;
};

// The names CreateModel knows, in the order above.
std::vector<std::string> ModelNames();

// The layer graph of an image model (every name but "mlp"), without device
// memory: for shapes and parameter counts. INVALID_ARGUMENT for an unknown
// name, classes below 1 or an input too small for the network.
absl::StatusOr<Graph> BuildModelGraph(const ModelSpec& spec);

// The model, with buffers for batches of up to `max_batch` on `device` (not
// owned; it must outlive the model).
absl::StatusOr<std::unique_ptr<Model>> CreateModel(const ModelSpec& spec,
                                                   int max_batch,
                                                   Device* device);

}  // namespace lockstep

#endif  // LOCKSTEP_WORKER_MODEL_MODELS_H_
