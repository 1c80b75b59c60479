#include "worker/device/gradient_hand_off.h"

#include <cstring>

#include "absl/status/statusor.h"
#include "common/base/status_macros.h"

namespace lockstep {

absl::StatusOr<std::unique_ptr<DeviceBuffer>> GradientHandOff::AllocateStaging(
    Device* device, size_t floats) {
  if (device->BuffersAreHostMemory()) return nullptr;
  return device->AllocateHost(floats * sizeof(float));
}

absl::Status GradientHandOff::Copy(int64_t begin, int64_t end) {
  if (end <= begin) return absl::OkStatus();
  if (host_gradient_ == nullptr) {  // Host memory: one copy, at once.
    RETURN_IF_ERROR(device_->Synchronize());
    std::memcpy(gradient_.data() + begin, device_gradient_ + begin,
                static_cast<size_t>(end - begin) * sizeof(float));
    if (on_ready_) on_ready_(begin, end);
    return absl::OkStatus();
  }
  RETURN_IF_ERROR(device_->CopyToHostAsync(
      device_gradient_ + begin, host_gradient_ + begin,
      static_cast<size_t>(end - begin) * sizeof(float)));
  if (!on_ready_) return absl::OkStatus();
  ASSIGN_OR_RETURN(const uint64_t mark, device_->MarkCopies());
  in_flight_.push_back(Piece{begin, end, mark});
  while (!in_flight_.empty()) {
    ASSIGN_OR_RETURN(const bool done,
                     device_->CopiesDone(in_flight_.front().mark));
    if (!done) break;
    HandOver(in_flight_.front());
    in_flight_.pop_front();
  }
  return absl::OkStatus();
}

absl::Status GradientHandOff::Finish() {
  if (host_gradient_ == nullptr) return device_->Synchronize();  // Copied.
  if (!on_ready_) {
    RETURN_IF_ERROR(device_->Synchronize());
    std::memcpy(gradient_.data(), host_gradient_,
                gradient_.size() * sizeof(float));
    return absl::OkStatus();
  }
  while (!in_flight_.empty()) {
    RETURN_IF_ERROR(device_->WaitForCopies(in_flight_.front().mark));
    HandOver(in_flight_.front());
    in_flight_.pop_front();
  }
  // The marks end here; the math after the last copy is done too.
  return device_->Synchronize();
}

void GradientHandOff::HandOver(const Piece& piece) {
  std::memcpy(gradient_.data() + piece.begin, host_gradient_ + piece.begin,
              static_cast<size_t>(piece.end - piece.begin) * sizeof(float));
  on_ready_(piece.begin, piece.end);
}

}  // namespace lockstep
