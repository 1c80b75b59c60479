// Argument checks shared by every Device implementation, so that CPU and
// CUDA refuse the same bad calls with the same messages.
#ifndef LOCKSTEP_WORKER_DEVICE_CHECKS_H_
#define LOCKSTEP_WORKER_DEVICE_CHECKS_H_

#include <cstdint>

#include "absl/status/status.h"
#include "absl/strings/str_format.h"

namespace lockstep {

// Device::SoftmaxCrossEntropy's shape and pointer rules. With zero rows the
// call is a no-op and the data pointers may be null.
inline absl::Status CheckSoftmaxCrossEntropyArgs(int rows, int cols,
                                                 const float* logits,
                                                 const int32_t* labels,
                                                 const double* loss_sum,
                                                 const int64_t* correct) {
  if (rows < 0 || cols < 1) {
    return absl::InvalidArgumentError(
        absl::StrFormat("SoftmaxCrossEntropy: bad shape %d x %d", rows, cols));
  }
  if (loss_sum == nullptr || correct == nullptr) {
    return absl::InvalidArgumentError(
        "SoftmaxCrossEntropy: null loss_sum or correct");
  }
  if (rows > 0 && (logits == nullptr || labels == nullptr)) {
    return absl::InvalidArgumentError(
        "SoftmaxCrossEntropy: null logits or labels");
  }
  return absl::OkStatus();
}

}  // namespace lockstep

#endif  // LOCKSTEP_WORKER_DEVICE_CHECKS_H_
