// The CPU device's direct convolutions (cpu_conv.h) over a batch on one or
// more threads: a CpuThreadPool splits the batch into one run of images per
// thread, and each thread convolves its own images with its own scratch.
// Outputs and input gradients are per image, so they come out the same
// whatever the thread count. Kernel gradients are summed per thread and then
// across threads in thread order: the same bits on every run with the same
// thread count (one thread: exactly cpu_conv.h's).
// Externally synchronized, like the device that owns it.
#ifndef LOCKSTEP_WORKER_DEVICE_CPU_CPU_CONV_RUNNER_H_
#define LOCKSTEP_WORKER_DEVICE_CPU_CPU_CONV_RUNNER_H_

#include <cstdint>
#include <vector>

#include "absl/functional/function_ref.h"
#include "absl/status/status.h"
#include "worker/device/cpu/cpu_conv.h"
#include "worker/device/cpu/cpu_thread_pool.h"
#include "worker/device/image_geometry.h"

namespace lockstep {

class DirectConvRunner {
 public:
  explicit DirectConvRunner(int threads);

  int threads() const { return pool_.threads(); }

  // As cpu_ops::DirectConvForward and the rest, for the whole batch.
  absl::Status Forward(const WindowGeometry& window, int filters,
                       const float* x, const float* kernel, float* y);
  absl::Status BackwardData(const WindowGeometry& window, int filters,
                            const float* dy, const float* kernel, float* dx);
  absl::Status BackwardFilter(const WindowGeometry& window, int filters,
                              const float* x, const float* dy,
                              float* kernel_grad);

 private:
  // Calls fn(share, images, first) on every thread, `images` being `window`
  // cut to that thread's run of images from image `first`; the first error.
  absl::Status ForEachShare(
      const WindowGeometry& window,
      absl::FunctionRef<absl::Status(int share, const WindowGeometry& images,
                                     int64_t first)>
          fn);

  CpuThreadPool pool_;
  std::vector<cpu_ops::ConvScratch> scratch_;      // One per thread.
  std::vector<std::vector<float>> partial_grads_;  // Threads 1 and up.
};

}  // namespace lockstep

#endif  // LOCKSTEP_WORKER_DEVICE_CPU_CPU_CONV_RUNNER_H_
