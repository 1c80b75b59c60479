// Uploads host floats to a device, copying each value as few times as the
// device allows.
//
// On a device whose buffers are host memory (the CPU's) an upload is one
// copy, straight from the caller's values. On a GPU, a copy from pageable
// memory is slow, so values are staged through page-locked memory first --
// unless they already lie in the page-locked buffer that Lend() gave out,
// from which the copy starts at once. A caller that keeps its values there
// (the trainer keeps the weights the server sends there) saves one pass
// over them each upload: 94 MB a step for ResNet-50.
#ifndef LOCKSTEP_WORKER_DEVICE_HOST_UPLOADER_H_
#define LOCKSTEP_WORKER_DEVICE_HOST_UPLOADER_H_

#include <cstddef>
#include <memory>

#include "absl/status/status.h"
#include "absl/status/statusor.h"
#include "absl/types/span.h"
#include "worker/device/device.h"

namespace lockstep {

class HostUploader {
 public:
  // Uploads of up to `floats` floats to `device` (not owned).
  HostUploader(Device* device, size_t floats)
      : device_(device), floats_(floats) {}

  // A host buffer of `floats` floats that the uploader never writes, and
  // from which Upload copies without staging: page-locked memory on a GPU;
  // empty where the device's buffers are host memory, since there an upload
  // is one copy from anywhere. The same buffer on every call; it lives as
  // long as the uploader.
  absl::StatusOr<absl::Span<float>> Lend();

  // Copies `values` (at most `floats` of them, in host memory) to `dst` in
  // device memory, and returns when the copy is done.
  absl::Status Upload(absl::Span<const float> values, void* dst);

 private:
  Device* const device_;
  const size_t floats_;
  std::unique_ptr<DeviceBuffer> lent_;     // From the first Lend().
  std::unique_ptr<DeviceBuffer> staging_;  // From the first staged Upload.
};

}  // namespace lockstep

#endif  // LOCKSTEP_WORKER_DEVICE_HOST_UPLOADER_H_
