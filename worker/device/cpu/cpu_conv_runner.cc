#include "worker/device/cpu/cpu_conv_runner.h"

#include "common/base/status_macros.h"
#include "worker/device/device_checks.h"

namespace lockstep {

DirectConvRunner::DirectConvRunner(int threads)
    : pool_(threads),
      scratch_(pool_.threads()),
      partial_grads_(pool_.threads()) {}

absl::Status DirectConvRunner::ForEachShare(
    const WindowGeometry& window,
    absl::FunctionRef<absl::Status(int, const WindowGeometry&, int64_t)> fn) {
  std::vector<absl::Status> statuses(pool_.threads());
  pool_.Run(window.input.batch, [&](int share, int64_t begin, int64_t end) {
    WindowGeometry images = window;
    images.input.batch = static_cast<int>(end - begin);
    statuses[share] = fn(share, images, begin);
  });
  for (const absl::Status& status : statuses) RETURN_IF_ERROR(status);
  return absl::OkStatus();
}

absl::Status DirectConvRunner::Forward(const WindowGeometry& window,
                                       int filters, const float* x,
                                       const float* kernel, float* y) {
  ASSIGN_OR_RETURN(const int64_t outputs,
                   CheckConvForwardArgs(window, filters, x, kernel, y));
  if (outputs == 0) return absl::OkStatus();
  const int64_t in_image = window.input.ImageSize();
  const int64_t out_image =
      int64_t{window.out_height} * window.out_width * filters;
  return ForEachShare(
      window, [&](int share, const WindowGeometry& images, int64_t first) {
        return cpu_ops::DirectConvForward(
            images, filters, x == nullptr ? nullptr : x + first * in_image,
            kernel, y + first * out_image, &scratch_[share]);
      });
}

absl::Status DirectConvRunner::BackwardData(const WindowGeometry& window,
                                            int filters, const float* dy,
                                            const float* kernel, float* dx) {
  ASSIGN_OR_RETURN(const int64_t inputs,
                   CheckConvBackwardDataArgs(window, filters, dy, kernel, dx));
  if (inputs == 0) return absl::OkStatus();
  const int64_t in_image = window.input.ImageSize();
  const int64_t out_image =
      int64_t{window.out_height} * window.out_width * filters;
  return ForEachShare(
      window, [&](int share, const WindowGeometry& images, int64_t first) {
        return cpu_ops::DirectConvBackwardData(
            images, filters, dy == nullptr ? nullptr : dy + first * out_image,
            kernel, dx + first * in_image, &scratch_[share]);
      });
}

absl::Status DirectConvRunner::BackwardFilter(const WindowGeometry& window,
                                              int filters, const float* x,
                                              const float* dy,
                                              float* kernel_grad) {
  ASSIGN_OR_RETURN(
      const int64_t weights,
      CheckConvBackwardFilterArgs(window, filters, x, dy, kernel_grad));
  if (weights == 0) return absl::OkStatus();
  const int64_t in_image = window.input.ImageSize();
  const int64_t out_image =
      int64_t{window.out_height} * window.out_width * filters;
  // Thread 0 writes kernel_grad itself; the others their own sums, added
  // to it in thread order below.
  RETURN_IF_ERROR(ForEachShare(
      window, [&](int share, const WindowGeometry& images, int64_t first) {
        float* grad = kernel_grad;
        if (share > 0) {
          partial_grads_[share].resize(weights);
          grad = partial_grads_[share].data();
        }
        return cpu_ops::DirectConvBackwardFilter(
            images, filters, x == nullptr ? nullptr : x + first * in_image,
            dy == nullptr ? nullptr : dy + first * out_image, grad,
            &scratch_[share]);
      }));
  for (int share = 1; share < pool_.threads(); ++share) {
    const float* partial = partial_grads_[share].data();
    for (int64_t i = 0; i < weights; ++i) kernel_grad[i] += partial[i];
  }
  return absl::OkStatus();
}

}  // namespace lockstep
