#include "server/core/group_generations.h"

#include "absl/strings/str_cat.h"

namespace lockstep {

absl::Status GroupGenerations::CheckSlot(const PushSlot& slot,
                                         const SyncPolicy* sync) const {
  if (slot.generation == 0) return absl::OkStatus();
  if (slot.generation < 0 || slot.batch_shard < 0 ||
      slot.batch_shard >= num_workers_) {
    return absl::InvalidArgumentError(
        absl::StrCat("group generation ", slot.generation, " batch shard ",
                     slot.batch_shard, ": the shard must be in [0, ",
                     num_workers_, ") and the generation positive"));
  }
  if (sync == nullptr || sync->mode != SyncMode::kSync ||
      sync->backup_workers != 0) {
    return absl::FailedPreconditionError(
        "elastic pushes (a group generation) need the workers' --sync=ps "
        "without --backup_workers");
  }
  const int64_t required = min_generation_.load(std::memory_order_acquire);
  if (slot.generation < required) {
    return absl::AbortedError(
        absl::StrCat("the worker group re-forms (generation ", required,
                     ", this push's is ", slot.generation,
                     "): a worker joins or leaves; join the group again"));
  }
  return absl::OkStatus();
}

bool GroupGenerations::Require(int64_t generation) {
  absl::MutexLock lock(&mu_);
  if (generation <= min_generation_.load(std::memory_order_relaxed)) {
    return false;
  }
  min_generation_.store(generation, std::memory_order_release);
  if (generation > seen_generation_.load(std::memory_order_relaxed)) {
    seen_generation_.store(generation, std::memory_order_release);
  }
  return true;
}

bool GroupGenerations::Note(int64_t generation) {
  // Every push of an elastic job comes here: a generation already seen is
  // the common case, answered without the lock.
  if (generation <= seen_generation_.load(std::memory_order_acquire)) {
    return false;
  }
  absl::MutexLock lock(&mu_);
  if (generation <= seen_generation_.load(std::memory_order_relaxed)) {
    return false;
  }
  seen_generation_.store(generation, std::memory_order_release);
  return true;
}

GroupGenerations::Leaving GroupGenerations::OnLeave() const {
  Leaving leaving;
  absl::MutexLock lock(&mu_);
  leaving.elastic = seen_generation_.load(std::memory_order_acquire) > 0;
  const int64_t required = min_generation_.load(std::memory_order_acquire);
  if (required > 0) leaving.regroup = required + 1;
  return leaving;
}

absl::Status GroupGenerations::ReformingError(int64_t generation) {
  return absl::AbortedError(absl::StrCat(
      "the worker group re-forms (generation ", generation,
      "): a worker joins or leaves; this step was not applied, join the "
      "group again and push it again"));
}

}  // namespace lockstep
