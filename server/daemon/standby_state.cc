#include "server/daemon/standby_state.h"

#include <utility>

#include "absl/strings/str_cat.h"

namespace lockstep {

void StandbyState::Update(ShardCheckpoint state) {
  if (newest_.has_value()) {
    for (ChunkState& old : newest_->chunks) {
      for (const ChunkState& now : state.chunks) {
        if (now.chunk == old.chunk && now.version > old.version) {
          previous_[old.chunk] = std::move(old);
          break;
        }
      }
    }
  }
  newest_ = std::move(state);
}

int64_t StandbyState::version() const {
  return newest_.has_value() ? newest_->version : -1;
}

absl::StatusOr<ShardCheckpoint> StandbyState::TakeOver() const {
  if (!newest_.has_value()) {
    return absl::FailedPreconditionError("the standby holds no state");
  }
  ShardCheckpoint out = *newest_;
  if (out.signature.sync.mode != SyncMode::kSync) return out;
  for (ChunkState& chunk : out.chunks) {
    if (chunk.version == out.version) continue;
    auto before = previous_.find(chunk.chunk);
    if (before == previous_.end() || before->second.version != out.version) {
      return absl::FailedPreconditionError(absl::StrCat(
          "chunk ", chunk.chunk, " is held at version ", chunk.version,
          before == previous_.end()
              ? std::string(" only")
              : absl::StrCat(" and ", before->second.version),
          ", not at the shard's version ", out.version));
    }
    chunk = before->second;
  }
  return out;
}

}  // namespace lockstep
