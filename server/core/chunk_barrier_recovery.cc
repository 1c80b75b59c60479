// ChunkBarrier's recovery duties: checkpoints (Export, Restore), shutting
// down (Close) and step timeouts (Pending, Expire, HasPushed). Split from
// chunk_barrier.cc to keep each file about one concern; the class is
// declared in chunk_barrier.h.
#include <algorithm>
#include <optional>
#include <string>
#include <utility>
#include <vector>

#include "absl/strings/str_cat.h"
#include "server/core/chunk_barrier.h"

namespace lockstep {

std::optional<ChunkState> ChunkBarrier::Export() {
  absl::MutexLock lock(&mu_);
  if (!initialized_) return std::nullopt;
  ChunkState state;
  state.chunk = chunk_.index;
  state.version = version_;
  state.weights = *published_;
  for (const auto& [name, values] : optimizer_->Slots()) {
    state.slots.emplace_back(name,
                             std::vector<float>(values.begin(), values.end()));
  }
  return state;
}

absl::Status ChunkBarrier::Restore(const ChunkState& state) {
  Answers answers;
  {
    absl::MutexLock lock(&mu_);
    if (state.weights.size() != static_cast<size_t>(chunk_.size)) {
      return absl::InvalidArgumentError(
          absl::StrCat("chunk ", chunk_.index, " has ", chunk_.size,
                       " weights, the checkpoint ", state.weights.size()));
    }
    std::vector<std::pair<std::string, absl::Span<float>>> slots =
        optimizer_->Slots();
    if (slots.size() != state.slots.size()) {
      return absl::InvalidArgumentError(
          absl::StrCat("chunk ", chunk_.index, " optimizer has ", slots.size(),
                       " state vectors, the checkpoint ", state.slots.size()));
    }
    for (size_t i = 0; i < slots.size(); ++i) {
      if (slots[i].first != state.slots[i].first ||
          slots[i].second.size() != state.slots[i].second.size()) {
        return absl::InvalidArgumentError(absl::StrCat(
            "chunk ", chunk_.index, " optimizer state ", slots[i].first,
            " does not match the checkpoint's ", state.slots[i].first));
      }
    }
    for (size_t i = 0; i < slots.size(); ++i) {
      std::copy(state.slots[i].second.begin(), state.slots[i].second.end(),
                slots[i].second.begin());
    }
    version_ = state.version;
    initialized_ = true;
    PublishLocked(std::make_shared<const std::vector<float>>(state.weights));
    for (auto& [min_version, cb] : pull_waiters_) {
      answers.Add(std::move(cb), SnapshotLocked());
    }
    pull_waiters_.clear();
  }
  answers.Run();
  return absl::OkStatus();
}

void ChunkBarrier::Close(const absl::Status& status) {
  Answers answers;
  {
    absl::MutexLock lock(&mu_);
    if (closed_) return;
    closed_ = true;
    close_status_ = status;
    for (ChunkCallback& cb : push_waiters_) answers.Add(std::move(cb), status);
    for (SspWaiter& w : ssp_waiters_) answers.Add(std::move(w.done), status);
    for (auto& [v, cb] : pull_waiters_) answers.Add(std::move(cb), status);
    push_waiters_.clear();
    ssp_waiters_.clear();
    pull_waiters_.clear();
    ForgetHeldLocked();
    ForgetPreviousLocked();
  }
  answers.Run();
}

void ChunkBarrier::ReleaseMemory() {
  absl::MutexLock lock(&mu_);
  if (!closed_) return;
  std::vector<float>().swap(accumulator_);
  optimizer_.reset();
  published_.reset();  // Pulls already answered keep their own reference.
  previous_.reset();
}

std::optional<ChunkBarrier::Gathering> ChunkBarrier::Pending() const {
  absl::MutexLock lock(&mu_);
  if (policy_.mode == SyncMode::kSsp) {
    if (ssp_waiters_.empty()) return std::nullopt;
    Gathering g;
    g.step = MinClockLocked();  // The slowest ranks' next step.
    g.since = ssp_waiters_.front().since;
    for (const SspWaiter& w : ssp_waiters_)
      g.since = std::min(g.since, w.since);
    for (int r = 0; r < num_workers_; ++r) {
      if (clock_[r] == g.step) g.missing.push_back(r);
    }
    return g;
  }
  if (policy_.mode != SyncMode::kSync || num_pushed_ == 0) {
    return std::nullopt;
  }
  Gathering g;
  g.step = version_;
  g.since = first_push_;
  for (int r = 0; r < num_workers_; ++r) {
    if (!pushed_[r]) g.missing.push_back(r);
  }
  return g;
}

bool ChunkBarrier::Expire(int64_t step, const absl::Status& status) {
  Answers answers;
  {
    absl::MutexLock lock(&mu_);
    if (policy_.mode == SyncMode::kSsp) {
      // The held pushes were applied: only their answers are given up.
      if (ssp_waiters_.empty() || MinClockLocked() != step) return false;
      for (SspWaiter& w : ssp_waiters_) answers.Add(std::move(w.done), status);
      ssp_waiters_.clear();
    } else {
      if (policy_.mode != SyncMode::kSync || num_pushed_ == 0 ||
          version_ != step) {
        return false;
      }
      // Nothing summed yet (every push held, in rank order): the
      // accumulator still holds the previous version's weights, for an
      // exact pull.
      if (!accumulator_holds_previous_) {
        std::fill(accumulator_.begin(), accumulator_.end(), 0.0f);
      }
      std::fill(pushed_.begin(), pushed_.end(), false);
      std::fill(arrivals_.begin(), arrivals_.end(), absl::InfinitePast());
      num_pushed_ = 0;
      ForgetHeldLocked();
      for (ChunkCallback& cb : push_waiters_) {
        answers.Add(std::move(cb), status);
      }
      push_waiters_.clear();
    }
  }
  answers.Run();
  return true;
}

bool ChunkBarrier::HasPushed(int rank) const {
  absl::MutexLock lock(&mu_);
  if (policy_.mode == SyncMode::kSync) return pushed_[rank];
  if (policy_.mode == SyncMode::kSsp) {
    return clock_[rank] > MinClockLocked();
  }
  return false;
}

}  // namespace lockstep
