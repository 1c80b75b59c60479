#include "worker/train/training_callback.h"

namespace lockstep {

double LearningRateAt(const OptimizerConfig& optimizer, int64_t /*step*/) {
  // A constant rate: every step is applied with the optimizer's own.
  return optimizer.learning_rate;
}

}  // namespace lockstep
