// The CPU device's batch-normalization operations: plain loops over host
// memory with double accumulators, with Device's semantics (see
// worker/device/device.h), which CpuDevice forwards to. Each checks its
// arguments first and writes nothing when they are bad. Stateless and
// thread-compatible.
#ifndef LOCKSTEP_WORKER_DEVICE_CPU_CPU_BATCH_NORM_OPS_H_
#define LOCKSTEP_WORKER_DEVICE_CPU_CPU_BATCH_NORM_OPS_H_

#include "absl/status/status.h"

namespace lockstep {
namespace cpu_ops {

absl::Status BatchNormTraining(int rows, int channels, const float* x,
                               const float* gamma, const float* beta,
                               float epsilon, float momentum, float* y,
                               float* moving_mean, float* moving_variance,
                               float* saved_mean, float* saved_inv_std);
absl::Status BatchNormInference(int rows, int channels, const float* x,
                                const float* gamma, const float* beta,
                                const float* moving_mean,
                                const float* moving_variance, float epsilon,
                                float* y);
absl::Status BatchNormBackward(int rows, int channels, const float* x,
                               const float* dy, const float* gamma,
                               const float* saved_mean,
                               const float* saved_inv_std, float* dx,
                               float* dgamma, float* dbeta);

}  // namespace cpu_ops
}  // namespace lockstep

#endif  // LOCKSTEP_WORKER_DEVICE_CPU_CPU_BATCH_NORM_OPS_H_
