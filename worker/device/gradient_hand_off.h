// Hands a model's gradient to the caller of ComputeGradients piece by piece
// during backprop (Model::GradientReadyFn), without making the device wait
// for the host.
//
// After backprop finishes a layer, the model calls Copy() for the layer's
// piece of the device gradient: its copy to the host is queued behind the
// layer's math, and every earlier piece whose copy has landed goes to
// on_ready, in the order the pieces were queued. The model then queues the
// next layer at once; Finish() hands over the pieces still in flight,
// waiting for each. On the CPU device the copies are done when they return,
// so each piece goes out as soon as its layer is done; on a GPU the host
// queues the layers ahead of the device, which never idles while the host
// copies a piece out or starts its push (waiting for each piece with
// Synchronize() did both: it drained the device and held the next layer's
// launches back).
#ifndef LOCKSTEP_WORKER_DEVICE_GRADIENT_HAND_OFF_H_
#define LOCKSTEP_WORKER_DEVICE_GRADIENT_HAND_OFF_H_

#include <cstdint>
#include <deque>
#include <functional>
#include <memory>

#include "absl/status/status.h"
#include "absl/status/statusor.h"
#include "absl/types/span.h"
#include "worker/device/device.h"

namespace lockstep {

class GradientHandOff {
 public:
  using ReadyFn = std::function<void(int64_t begin, int64_t end)>;

  // The host staging buffer for a gradient of `floats` floats: null where
  // the device's buffers are host memory (the CPU's), which is then copied
  // straight into the caller's gradient, once.
  static absl::StatusOr<std::unique_ptr<DeviceBuffer>> AllocateStaging(
      Device* device, size_t floats);

  // `device_gradient` (device memory) holds gradient.size() floats, and so
  // does `staging` (from AllocateStaging, may be null); `gradient` is the
  // caller's. Without on_ready, Finish brings the whole gradient.
  GradientHandOff(Device* device, const float* device_gradient,
                  DeviceBuffer* staging, absl::Span<float> gradient,
                  const ReadyFn& on_ready)
      : device_(device),
        device_gradient_(device_gradient),
        host_gradient_(staging == nullptr ? nullptr : staging->As<float>()),
        gradient_(gradient),
        on_ready_(on_ready) {}

  // [begin, end) of the gradient is final on the device: queues its copy
  // to the host, then hands over every piece already there.
  absl::Status Copy(int64_t begin, int64_t end);
  // Hands over the pieces still in flight, in order. Call once, after the
  // last Copy and before reading `gradient`.
  absl::Status Finish();

 private:
  struct Piece {
    int64_t begin, end;
    uint64_t mark;
  };
  // Copies the piece out of the host buffer and calls on_ready.
  void HandOver(const Piece& piece);

  Device* const device_;
  const float* const device_gradient_;
  float* const host_gradient_;  // Null: no staging (host memory device).
  const absl::Span<float> gradient_;
  const ReadyFn on_ready_;  // A copy: the caller may pass a temporary.
  std::deque<Piece> in_flight_;  // Queued, not yet handed over.
};

}  // namespace lockstep

#endif  // LOCKSTEP_WORKER_DEVICE_GRADIENT_HAND_OFF_H_
