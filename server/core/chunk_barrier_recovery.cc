// ChunkBarrier's recovery duties: checkpoints (Export, Restore), shutting
// down (Close, ReleaseMemory) and step timeouts (Pending, Expire,
// HasPushed). Split from chunk_barrier.cc to keep each file about one
// concern; the class is declared in chunk_barrier.h.
#include <algorithm>
#include <memory>
#include <optional>
#include <string>
#include <utility>
#include <vector>

#include "absl/strings/str_cat.h"
#include "server/core/chunk_barrier.h"

namespace lockstep {
namespace {

// Whether `slots` (the optimizer's) can take the checkpoint's `state`.
absl::Status CheckSlots(
    int chunk,
    const std::vector<std::pair<std::string, absl::Span<float>>>& slots,
    const ChunkState& state) {
  if (slots.size() != state.slots.size()) {
    return absl::InvalidArgumentError(
        absl::StrCat("chunk ", chunk, " optimizer has ", slots.size(),
                     " state vectors, the checkpoint ", state.slots.size()));
  }
  for (size_t i = 0; i < slots.size(); ++i) {
    if (slots[i].first != state.slots[i].first ||
        slots[i].second.size() != state.slots[i].second.size()) {
      return absl::InvalidArgumentError(absl::StrCat(
          "chunk ", chunk, " optimizer state ", slots[i].first,
          " does not match the checkpoint's ", state.slots[i].first));
    }
  }
  return absl::OkStatus();
}

}  // namespace

std::optional<ChunkState> ChunkBarrier::Export() {
  absl::MutexLock lock(&mu_);
  if (!core_.versions().initialized()) return std::nullopt;
  return ExportLocked();
}

ChunkState ChunkBarrier::ExportLocked() {
  ChunkState state;
  state.chunk = chunk_.index;
  state.version = core_.versions().version();
  state.weights = core_.versions().weights();
  for (const auto& [name, values] : core_.optimizer()->Slots()) {
    state.slots.emplace_back(name,
                             std::vector<float>(values.begin(), values.end()));
  }
  return state;
}

void ChunkBarrier::PinEvery(int64_t every) {
  absl::MutexLock lock(&mu_);
  pin_every_ = every;
}

int64_t ChunkBarrier::PinnedVersion() const {
  absl::MutexLock lock(&mu_);
  return pinned_.has_value() ? pinned_->version : -1;
}

std::optional<ChunkState> ChunkBarrier::TakePinned() {
  absl::MutexLock lock(&mu_);
  std::optional<ChunkState> taken = std::move(pinned_);
  pinned_.reset();
  return taken;
}

int64_t ChunkBarrier::pins_skipped() const {
  absl::MutexLock lock(&mu_);
  return pins_skipped_;
}

absl::Status ChunkBarrier::Restore(const ChunkState& state) {
  ChunkAnswers answers;
  {
    absl::MutexLock lock(&mu_);
    if (state.weights.size() != static_cast<size_t>(chunk_.size)) {
      return absl::InvalidArgumentError(
          absl::StrCat("chunk ", chunk_.index, " has ", chunk_.size,
                       " weights, the checkpoint ", state.weights.size()));
    }
    core_.Allocate();
    std::vector<std::pair<std::string, absl::Span<float>>> slots =
        core_.optimizer()->Slots();
    if (absl::Status fits = CheckSlots(chunk_.index, slots, state);
        !fits.ok()) {
      return fits;
    }
    for (size_t i = 0; i < slots.size(); ++i) {
      std::copy(state.slots[i].second.begin(), state.slots[i].second.end(),
                slots[i].second.begin());
    }
    PublishLocked(state.version,
                  std::make_shared<const std::vector<float>>(state.weights),
                  &answers);
  }
  answers.Run();
  return absl::OkStatus();
}

void ChunkBarrier::Close(const absl::Status& status) {
  ChunkAnswers answers;
  {
    absl::MutexLock lock(&mu_);
    if (closed_) return;
    closed_ = true;
    close_status_ = status;
    rule_->Close(status, &answers);
    core_.versions().FailPulls(status, &answers);
    core_.accumulator().ForgetHeld();
    core_.versions().ForgetPrevious();
  }
  answers.Run();
}

void ChunkBarrier::ReleaseMemory() {
  absl::MutexLock lock(&mu_);
  if (!closed_) return;
  core_.Release();  // Pulls already answered keep their own reference.
}

std::optional<ChunkBarrier::Gathering> ChunkBarrier::Pending() const {
  absl::MutexLock lock(&mu_);
  return rule_->Pending();
}

bool ChunkBarrier::Expire(int64_t step, const absl::Status& status) {
  ChunkAnswers answers;
  {
    absl::MutexLock lock(&mu_);
    if (!rule_->Expire(step, status, &answers)) return false;
  }
  answers.Run();
  return true;
}

bool ChunkBarrier::Excuse(absl::Span<const int> ranks) {
  ChunkAnswers answers;
  {
    absl::MutexLock lock(&mu_);
    if (!rule_->Excuse(ranks, &answers)) return false;
  }
  answers.Run();
  return true;
}

bool ChunkBarrier::HasPushed(int rank) const {
  absl::MutexLock lock(&mu_);
  return rule_->HasPushed(rank);
}

}  // namespace lockstep
