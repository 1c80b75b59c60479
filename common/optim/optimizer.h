// Optimizers applied by a parameter-server shard to its master weights.
//
// Formulas and defaults follow Keras (tf.keras.optimizers, 2.11+):
//   SGD:       w -= lr * g
//   Momentum:  v = momentum * v - lr * g;  w += v
//              nesterov: w += momentum * v - lr * g   (v already updated)
//   Adam:      t = step + 1
//              m = b1 * m + (1 - b1) * g;  v = b2 * v + (1 - b2) * g^2
//              alpha = lr * sqrt(1 - b2^t) / (1 - b1^t)
//              w -= alpha * m / (sqrt(v) + epsilon)
//   AdamW:     w -= w * weight_decay * lr, then the Adam update.
//   Average:   w = g: the summation mode, where the "weights" the servers
//              publish are the mean gradient (OptimizerConfig::kAverage).
// lr is the learning rate of the step, LearningRateAt (common/optim/lr_schedule.h)
// rounded to fp32. Arithmetic is fp32 on fp32 state, except lr and the
// bias-correction factor alpha, which are computed in double once per call.
//
// An Optimizer owns its slot vectors (momentum, m, v) for the whole flat
// parameter vector. Apply() touches only [offset, offset + size) of each slot,
// so concurrent calls on disjoint ranges are safe; calls on overlapping ranges
// must be externally synchronized.
#ifndef LOCKSTEP_COMMON_OPTIM_OPTIMIZER_H_
#define LOCKSTEP_COMMON_OPTIM_OPTIMIZER_H_

#include <cstdint>
#include <memory>
#include <string>
#include <utility>
#include <vector>

#include "absl/status/statusor.h"
#include "absl/types/span.h"
#include "common/model/model_signature.h"

namespace lockstep {

class Optimizer {
 public:
  virtual ~Optimizer() = default;

  // INVALID_ARGUMENT for an unknown name or settings out of range (learning
  // rate not positive and finite, momentum or betas outside [0, 1), epsilon
  // not positive, weight decay negative, negative parameter count, a
  // learning-rate schedule ValidateLrSchedule refuses).
  static absl::StatusOr<std::unique_ptr<Optimizer>> Create(
      const OptimizerConfig& config, int64_t num_parameters);

  // Applies the update of step `step` (0-based: it turns version `step` into
  // version step + 1) to weights[offset, offset + weights.size()), which is
  // the slice of the flat parameter vector starting at `offset`.
  // `gradient.size()` must equal `weights.size()` (checked by the caller).
  void Apply(int64_t step, int64_t offset, absl::Span<float> weights,
             absl::Span<const float> gradient) {
    ApplyMean(step, offset, weights, weights, gradient, 1.0f);
  }

  // The same update in one pass over memory where three would do: the
  // gradient is `sum` times `scale` (each element multiplied before use, so
  // the result has the bits of `sum *= scale` followed by Apply), and the
  // weights are read from `from` and the new ones written to `to`. `from`,
  // `to` and `sum` have the same size (checked by the caller); `from` is
  // either `to` itself or does not overlap it.
  virtual void ApplyMean(int64_t step, int64_t offset,
                         absl::Span<const float> from, absl::Span<float> to,
                         absl::Span<const float> sum, float scale) = 0;

  virtual const OptimizerConfig& config() const = 0;

  // Named state vectors, each of num_parameters elements (empty for SGD),
  // for checkpoints.
  virtual std::vector<std::pair<std::string, absl::Span<float>>> Slots() = 0;
};

}  // namespace lockstep

#endif  // LOCKSTEP_COMMON_OPTIM_OPTIMIZER_H_
