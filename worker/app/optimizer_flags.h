// lockstep_worker's optimizer flags (--optimizer, --lr and the optimizer's
// settings) and learning-rate schedule flags (--lr_schedule and the --lr_*
// settings), defined in optimizer_flags.cc with their help text, and their
// translation into an OptimizerConfig. The rate of a step is
// LearningRateAt(config, step) (common/optim/lr_schedule.h).
#ifndef LOCKSTEP_WORKER_APP_OPTIMIZER_FLAGS_H_
#define LOCKSTEP_WORKER_APP_OPTIMIZER_FLAGS_H_

#include "absl/status/statusor.h"
#include "common/model/model_signature.h"

namespace lockstep {

// The schedule the flags ask for, checked (ValidateLrSchedule); `lr_given`
// says whether --lr was passed, which a piecewise schedule (its rates are
// --lr_values) refuses. INVALID_ARGUMENT naming the flag otherwise.
absl::StatusOr<LrSchedule> LrScheduleFromFlags(bool lr_given);

// The optimizer the flags ask for (--optimizer, --lr and its settings),
// with its schedule; INVALID_ARGUMENT naming the flag otherwise.
absl::StatusOr<OptimizerConfig> OptimizerFromFlags();

}  // namespace lockstep

#endif  // LOCKSTEP_WORKER_APP_OPTIMIZER_FLAGS_H_
