// lockstep_worker's learning-rate schedule flags (--lr_schedule and the
// --lr_* settings, defined in lr_schedule_flags.cc with their help text)
// and their translation into an LrSchedule. The rate of a step is
// LearningRateAt(config, step) (common/lr_schedule.h) on the optimizer
// config these flags complete.
#ifndef LOCKSTEP_WORKER_APP_LR_SCHEDULE_FLAGS_H_
#define LOCKSTEP_WORKER_APP_LR_SCHEDULE_FLAGS_H_

#include "absl/status/statusor.h"
#include "common/model_signature.h"

namespace lockstep {

// The schedule the flags ask for, checked (ValidateLrSchedule); `lr_given`
// says whether --lr was passed, which a piecewise schedule (its rates are
// --lr_values) refuses. INVALID_ARGUMENT naming the flag otherwise.
absl::StatusOr<LrSchedule> LrScheduleFromFlags(bool lr_given);

}  // namespace lockstep

#endif  // LOCKSTEP_WORKER_APP_LR_SCHEDULE_FLAGS_H_
