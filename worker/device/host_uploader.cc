#include "worker/device/host_uploader.h"

#include <cstdint>
#include <cstring>

#include "absl/strings/str_cat.h"
#include "common/base/status_macros.h"

namespace lockstep {

absl::StatusOr<absl::Span<float>> HostUploader::Lend() {
  if (device_->BuffersAreHostMemory()) return absl::Span<float>();
  if (lent_ == nullptr) {
    ASSIGN_OR_RETURN(lent_, device_->AllocateHost(floats_ * sizeof(float)));
  }
  return absl::Span<float>(lent_->As<float>(), floats_);
}

absl::Status HostUploader::Upload(absl::Span<const float> values, void* dst) {
  if (values.size() > floats_) {
    return absl::InvalidArgumentError(
        absl::StrCat("HostUploader: ", values.size(),
                     " floats to upload, room for ", floats_));
  }
  const size_t bytes = values.size() * sizeof(float);
  if (bytes == 0) return absl::OkStatus();
  const float* source = values.data();
  bool in_lent = false;
  if (lent_ != nullptr) {
    // As integers: comparing pointers into different objects is unspecified.
    const auto begin = reinterpret_cast<uintptr_t>(lent_->data());
    const auto first = reinterpret_cast<uintptr_t>(source);
    in_lent = first >= begin && first + bytes <= begin + lent_->bytes();
  }
  if (!in_lent && !device_->BuffersAreHostMemory()) {
    if (staging_ == nullptr) {
      ASSIGN_OR_RETURN(staging_,
                       device_->AllocateHost(floats_ * sizeof(float)));
    }
    std::memcpy(staging_->data(), source, bytes);
    source = staging_->As<float>();
  }
  return device_->CopyToDevice(source, dst, bytes);
}

}  // namespace lockstep
