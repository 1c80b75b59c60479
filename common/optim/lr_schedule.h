// Learning-rate schedules: lr(step) for an OptimizerConfig's LrSchedule
// (common/model/model_signature.h), and the check of a schedule's settings.
//
// `step` is the optimizer's 0-based step, the one that turns version `step`
// into version step + 1 (Keras's optimizer.iterations before the update).
// With lr = config.learning_rate and s = step - warmup_steps:
//   warmup (step < warmup_steps):
//       warmup_from + (decayed(0) - warmup_from) * step / warmup_steps
//   else decayed(s), where
//   constant:     lr
//   exponential:  lr * decay_rate ^ (s / decay_steps)
//                 (staircase: floor(s / decay_steps) in the exponent)
//   piecewise:    values[i], i the number of boundaries b with s > b
//                 (values[0] up to and including boundaries[0], as Keras)
//   cosine:       lr * ((1 - alpha) * 0.5 * (1 + cos(pi * t / decay_steps))
//                 + alpha),  t = min(s, decay_steps)
// These are Keras's ExponentialDecay, PiecewiseConstantDecay and CosineDecay;
// CosineDecay(initial_learning_rate=a, warmup_target=b, warmup_steps=n) is
// warmup_from = a, learning_rate = b, warmup_steps = n here. Arithmetic is
// in double; the optimizers round the result to fp32 once per step.
#ifndef LOCKSTEP_COMMON_OPTIM_LR_SCHEDULE_H_
#define LOCKSTEP_COMMON_OPTIM_LR_SCHEDULE_H_

#include <cstdint>

#include "absl/status/status.h"
#include "absl/strings/string_view.h"
#include "common/model/model_signature.h"

namespace lockstep {

// The most piecewise boundaries a schedule may have.
inline constexpr int kMaxLrBoundaries = 4096;

// The learning rate of step `step` (negative steps are read as 0). The
// schedule must have passed ValidateLrSchedule.
double LearningRateAt(const OptimizerConfig& config, int64_t step);

// INVALID_ARGUMENT naming the setting when the schedule's kind is unknown,
// one of its settings is out of range, or a setting its kind does not use
// is not at its default. A setting is named `name_prefix` and its field's
// name ("decay_steps"; the kind is "schedule"), so that a caller whose
// options are called "--lr_decay_steps" passes "--lr_".
absl::Status ValidateLrSchedule(const LrSchedule& schedule,
                                absl::string_view name_prefix = "");

}  // namespace lockstep

#endif  // LOCKSTEP_COMMON_OPTIM_LR_SCHEDULE_H_
