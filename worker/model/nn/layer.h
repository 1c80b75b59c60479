// The building block of the convolutional models: one Keras-style layer with
// its forward and backward pass on a Device.
//
// A Layer is a description first: it is created from its input shapes and
// options, and reports its output shape, its trainable parameters and its
// non-trainable state (batch norm's moving statistics) with Keras's names,
// shapes and initializers. It does not own its parameters: GraphModel keeps
// every layer's parameters in one flat device vector and hands each layer
// its slice in ForwardArgs / BackwardArgs. Prepare(device, max_batch) then
// allocates what the layer keeps between its forward and its backward pass
// (max pooling's arg-max indices, batch norm's batch statistics); a prepared
// layer runs batches of 1 to max_batch examples.
//
// Shapes are per example: every tensor is a batch of NHWC images, a flat
// vector being 1 x 1 x n. Externally synchronized, like the Device.
#ifndef LOCKSTEP_WORKER_MODEL_NN_LAYER_H_
#define LOCKSTEP_WORKER_MODEL_NN_LAYER_H_

#include <cstddef>
#include <cstdint>
#include <string>
#include <vector>

#include "absl/status/status.h"
#include "absl/types/span.h"
#include "worker/device/device.h"

namespace lockstep {

// One example's tensor: height x width x channels, stored NHWC.
struct TensorShape {
  int height = 1;
  int width = 1;
  int channels = 1;

  int64_t size() const { return int64_t{height} * width * channels; }
  // The shape of a batch of `batch` such tensors.
  NhwcShape Batch(int batch) const { return {batch, height, width, channels}; }
  std::string ToString() const;  // "32x32x3".
  bool operator==(const TensorShape& other) const {
    return height == other.height && width == other.width &&
           channels == other.channels;
  }
  bool operator!=(const TensorShape& other) const { return !(*this == other); }
};

// How a parameter or state tensor starts (Keras's defaults).
enum class Initializer {
  kZeros,
  kOnes,
  // Uniform in [-l, l], l = sqrt(6 / (fan_in + fan_out)).
  kGlorotUniform,
};

// One tensor a layer owns, as Keras names it within the layer ("kernel",
// "bias", "gamma", "beta", "moving_mean", "moving_variance").
struct ParamSpec {
  std::string name;
  std::vector<int64_t> shape;
  Initializer initializer = Initializer::kZeros;
  int64_t fan_in = 0;  // For kGlorotUniform.
  int64_t fan_out = 0;

  int64_t size() const;
};

// One forward pass. Pointers are device addresses; `inputs` has one entry per
// input (batch x input_shapes()[i] floats each), `output` receives batch x
// output_shape() floats. `params` and `state` are the layer's tensors back to
// back in Parameters() / States() order; `workspace` holds at least
// WorkspaceFloats(batch) floats that other layers share (nothing in it
// survives the call).
struct ForwardArgs {
  int batch = 0;
  absl::Span<const float* const> inputs;
  float* output = nullptr;
  const float* params = nullptr;
  float* state = nullptr;
  float* workspace = nullptr;
  bool training = false;  // Batch norm: batch statistics, moving update.
};

// One backward pass after a forward pass over the same batch: from
// output_grad (the loss's gradient with respect to `output`) it writes
// (overwrites) the gradients with respect to the parameters, in
// Parameters() order, and to each input whose `input_grads` entry is not
// null.
struct BackwardArgs {
  int batch = 0;
  absl::Span<const float* const> inputs;
  const float* output = nullptr;
  const float* output_grad = nullptr;
  absl::Span<float* const> input_grads;
  const float* params = nullptr;
  float* param_grads = nullptr;
  float* workspace = nullptr;
};

class Layer {
 public:
  virtual ~Layer() = default;
  Layer(const Layer&) = delete;
  Layer& operator=(const Layer&) = delete;

  const std::string& name() const { return name_; }
  const std::vector<TensorShape>& input_shapes() const { return inputs_; }
  const TensorShape& output_shape() const { return output_; }

  virtual std::vector<ParamSpec> Parameters() const { return {}; }
  virtual std::vector<ParamSpec> States() const { return {}; }
  int64_t NumParameters() const;
  int64_t NumStates() const;

  // Scratch floats a pass over `batch` examples needs (see ForwardArgs).
  virtual size_t WorkspaceFloats(int batch) const { return 0; }

  // Binds the layer to `device` (not owned; outlives the layer) for batches
  // of up to `max_batch` examples and allocates its buffers. Once only.
  absl::Status Prepare(Device* device, int max_batch);

  // Check the arguments (INVALID_ARGUMENT: batch outside [1, max_batch],
  // missing pointers; FAILED_PRECONDITION: not prepared) and run the pass.
  absl::Status Forward(const ForwardArgs& args);
  absl::Status Backward(const BackwardArgs& args);

 protected:
  Layer(std::string name, std::vector<TensorShape> inputs, TensorShape output);

  Device* device() const { return device_; }
  int max_batch() const { return max_batch_; }

 private:
  // Allocations of Prepare; device() and max_batch() are set.
  virtual absl::Status Allocate() { return absl::OkStatus(); }
  virtual absl::Status RunForward(const ForwardArgs& args) = 0;
  virtual absl::Status RunBackward(const BackwardArgs& args) = 0;

  absl::Status CheckBatch(const char* pass, int batch) const;

  const std::string name_;
  const std::vector<TensorShape> inputs_;
  const TensorShape output_;
  Device* device_ = nullptr;  // Not owned.
  int max_batch_ = 0;
};

}  // namespace lockstep

#endif  // LOCKSTEP_WORKER_MODEL_NN_LAYER_H_
