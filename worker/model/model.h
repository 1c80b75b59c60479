// What a worker trains: one replica of a classification model on a Device.
//
// A Model has trainable parameters, one flat fp32 vector in the order of
// Tensors() (Keras's names and shapes), which the parameter servers own and
// average gradients for; and possibly non-trainable state, a second flat
// vector in the order of StateTensors() (batch norm's moving mean and
// variance), which ComputeGradients updates on the device as Keras's
// training step does. The trainer can read the state after a step, average
// it over the workers and write it back, so that every replica evaluates
// alike. Inputs are `rows` examples of FeatureSize() floats each (images in
// NHWC order) and integer class labels; the loss is softmax cross-entropy.
//
// The implementation is GraphModel (worker/model/nn): every model, the MLP
// of worker/model/mlp.h included, is a graph of nn/ layers.
// Models are made by CreateModel (worker/model/models.h). Externally
// synchronized.
#ifndef LOCKSTEP_WORKER_MODEL_MODEL_H_
#define LOCKSTEP_WORKER_MODEL_MODEL_H_

#include <cstdint>
#include <functional>
#include <vector>

#include "absl/status/status.h"
#include "absl/status/statusor.h"
#include "absl/types/span.h"
#include "common/model/model_signature.h"

namespace lockstep {

struct BatchStats {
  double loss_sum = 0;  // Cross-entropy summed over the rows.
  int64_t correct = 0;  // Rows whose arg-max is the label.
  int64_t examples = 0;
};

class Model {
 public:
  // Called with [begin, end) of the flat gradient once that range is final.
  using GradientReadyFn = std::function<void(int64_t begin, int64_t end)>;

  virtual ~Model() = default;

  // The trainable tensors, in flat-vector order.
  virtual std::vector<TensorInfo> Tensors() const = 0;
  virtual int64_t NumParameters() const = 0;
  // Floats per example in `features`.
  virtual int64_t FeatureSize() const = 0;
  // The largest batch ComputeGradients takes (Evaluate takes any number).
  virtual int max_batch() const = 0;

  // Keras's default initialization drawn from `seed`: Glorot-uniform kernels
  // (Dense and Conv2D), zero biases, batch norm gamma 1 and beta 0. The same
  // seed gives the same bits on every machine.
  virtual std::vector<float> InitialWeights(uint64_t seed) const = 0;

  // Uploads NumParameters() weights.
  virtual absl::Status SetWeights(absl::Span<const float> weights) = 0;

  // A host buffer of NumParameters() + StateSize() floats, owned by the
  // model, which it never writes: SetWeights and SetState upload spans of it
  // without first copying them to page-locked memory (worker/
  // host_uploader.h). Empty where that saves nothing (the CPU device), and
  // for models without one.
  virtual absl::StatusOr<absl::Span<float>> HostWeightBuffer() {
    return absl::Span<float>();
  }

  // Forward and backward (training mode) on 1 to max_batch() rows: writes
  // the gradient of the mean loss over the rows into `gradient` (flat,
  // NumParameters() values, host memory) and updates the state. When
  // `on_ready` is given it is called once per parameter range, as soon as
  // backprop has finished that range (last layers first), so the caller can
  // send it while backprop goes on; together the ranges cover `gradient`.
  // (The default argument is repeated, identically, by every override.)
  virtual absl::StatusOr<BatchStats> ComputeGradients(
      absl::Span<const float> features, absl::Span<const int32_t> labels,
      absl::Span<float> gradient,
      const GradientReadyFn& on_ready = nullptr) = 0;

  // Forward only (inference mode), over any number of rows.
  virtual absl::StatusOr<BatchStats> Evaluate(
      absl::Span<const float> features, absl::Span<const int32_t> labels) = 0;

  // The non-trainable state tensors in flat-vector order (empty for a model
  // without state), their total size, and their Keras initial values
  // (moving mean 0, moving variance 1).
  virtual std::vector<TensorInfo> StateTensors() const = 0;
  virtual int64_t StateSize() const = 0;
  virtual std::vector<float> InitialState() const = 0;
  // Copies the current state (StateSize() values) to `state`.
  virtual absl::Status State(absl::Span<float> state) = 0;
  // Replaces the state with StateSize() values.
  virtual absl::Status SetState(absl::Span<const float> state) = 0;
};

}  // namespace lockstep

#endif  // LOCKSTEP_WORKER_MODEL_MODEL_H_
