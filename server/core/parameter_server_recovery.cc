// ParameterServer's recovery duties: step timeouts (warn, give up, evict)
// and checkpoints (snapshot and restore). Split from parameter_server.cc to
// keep each file about one concern; the class is declared in
// parameter_server.h.
#include <algorithm>
#include <optional>
#include <string>
#include <utility>
#include <vector>

#include "absl/strings/str_cat.h"
#include "common/status_macros.h"
#include "server/core/parameter_server.h"

namespace lockstep {

namespace {

// "1,3": the ranks, for a message.
std::string RankList(const std::vector<int>& ranks) {
  std::string list;
  for (int r : ranks) absl::StrAppend(&list, list.empty() ? "" : ",", r);
  return list;
}

}  // namespace

std::optional<ParameterServer::StepAlarm> ParameterServer::OldestWait(
    const std::vector<ChunkBarrier*>& chunks, absl::Time now) const {
  // The oldest waiting step over all chunks, and who is missing from it.
  std::optional<ChunkBarrier::Gathering> oldest;
  std::vector<bool> missing(options_.num_workers, false);
  for (ChunkBarrier* c : chunks) {
    std::optional<ChunkBarrier::Gathering> g = c->Pending();
    if (!g.has_value()) continue;
    if (!oldest.has_value() || g->since < oldest->since) oldest = g;
    for (int r : g->missing) missing[r] = true;
  }
  if (!oldest.has_value()) return std::nullopt;
  StepAlarm alarm;
  alarm.step = oldest->step;
  alarm.waited = now - oldest->since;
  for (int r = 0; r < options_.num_workers; ++r) {
    if (missing[r]) alarm.missing.push_back(r);
  }
  return alarm;
}

std::vector<ParameterServer::StepAlarm> ParameterServer::AlarmOnce(
    const StepAlarm& alarm, bool stalled) {
  absl::MutexLock lock(&mu_);
  int64_t& said = stalled ? ssp_stalled_step_ : warned_step_;
  if (said == alarm.step) return {};
  said = alarm.step;
  return {alarm};
}

void ParameterServer::GiveUpStep(const StepAlarm& alarm, bool fail_job,
                                 const std::vector<ChunkBarrier*>& chunks) {
  const std::string ranks = RankList(alarm.missing);
  if (fail_job) {
    const absl::Status cancelled = absl::CancelledError(absl::StrCat(
        "the job failed: step ", alarm.step, " timed out waiting for rank(s) ",
        ranks, " (the job fails when a worker is lost)"));
    for (ChunkBarrier* c : chunks) c->Expire(alarm.step, cancelled);
    return;
  }
  // Give up on the step everywhere; evict those who never came, so a late
  // push of theirs is refused and they register again.
  {
    absl::MutexLock lock(&mu_);
    for (int r : alarm.missing) {
      if (incarnations_[r] == 0) continue;
      revoked_[incarnations_[r]] = absl::AbortedError(absl::StrCat(
          "rank ", r, " was evicted: it did not push step ", alarm.step,
          " within the step timeout; register again"));
      incarnations_[r] = 0;
    }
  }
  const absl::Status aborted = absl::AbortedError(absl::StrCat(
      "step ", alarm.step, " timed out after ",
      absl::FormatDuration(alarm.waited), " waiting for rank(s) ", ranks,
      "; it was not applied: register again and push it again"));
  for (ChunkBarrier* c : chunks) c->Expire(alarm.step, aborted);
}

std::vector<ParameterServer::StepAlarm> ParameterServer::CheckStepTimeout(
    absl::Time now, absl::Duration timeout, bool fail_job) {
  std::vector<ChunkBarrier*> chunks;
  {
    absl::MutexLock lock(&mu_);
    chunks = OwnedChunksLocked();
  }
  std::optional<StepAlarm> alarm = OldestWait(chunks, now);
  if (!alarm.has_value() || alarm->waited < timeout / 2) return {};
  alarm->expired = alarm->waited >= timeout;
  {
    absl::MutexLock lock(&mu_);
    alarm->ssp =
        signature_.has_value() && signature_->sync.mode == SyncMode::kSsp;
  }
  if (!alarm->expired) return AlarmOnce(*alarm, /*stalled=*/false);
  // The held pushes were applied; nothing to give up on. The others wait
  // for the slowest (a replacement resumes the job): said once.
  if (alarm->ssp && !fail_job) return AlarmOnce(*alarm, /*stalled=*/true);
  GiveUpStep(*alarm, fail_job, chunks);
  return {*alarm};
}

absl::StatusOr<ShardCheckpoint> ParameterServer::Snapshot(
    absl::Duration timeout) {
  ShardCheckpoint checkpoint;
  std::vector<ChunkBarrier*> chunks;
  {
    absl::MutexLock lock(&mu_);
    if (!signature_.has_value() || VersionLocked() < 0) {
      return absl::FailedPreconditionError(
          "nothing to checkpoint before version 0");
    }
    checkpoint.signature = *signature_;
    checkpoint.shard = options_.shard;
    checkpoint.num_shards = options_.num_shards;
    checkpoint.num_workers = options_.num_workers;
    chunks = OwnedChunksLocked();
  }
  const bool same_version =
      checkpoint.signature.sync.mode == SyncMode::kSync;
  const absl::Time deadline = options_.env->Now() + timeout;
  while (true) {
    checkpoint.chunks.clear();
    int64_t low = -1, high = -1;
    for (ChunkBarrier* c : chunks) {
      std::optional<ChunkState> state = c->Export();
      if (!state.has_value()) {
        return absl::FailedPreconditionError("a chunk is not initialized");
      }
      low = low < 0 ? state->version : std::min(low, state->version);
      high = std::max(high, state->version);
      checkpoint.chunks.push_back(std::move(*state));
    }
    checkpoint.version = low;
    if (!same_version || low == high) return checkpoint;
    // In sync mode a chunk leads the others by at most one step, and only
    // until the pushes of that step reach them: a brief wait.
    if (options_.env->Now() >= deadline) {
      return absl::DeadlineExceededError(absl::StrCat(
          "chunks stayed at versions ", low, "..", high,
          " for the whole checkpoint timeout"));
    }
    options_.env->SleepFor(absl::Milliseconds(1));
  }
}

absl::Status ParameterServer::Restore(const ShardCheckpoint& checkpoint) {
  absl::MutexLock lock(&mu_);
  if (signature_.has_value()) {
    return absl::FailedPreconditionError(
        "a checkpoint is restored only before any worker registers");
  }
  if (checkpoint.shard != options_.shard ||
      checkpoint.num_shards != options_.num_shards ||
      checkpoint.num_workers != options_.num_workers) {
    return absl::FailedPreconditionError(absl::StrCat(
        "the checkpoint is of shard ", checkpoint.shard, " of ",
        checkpoint.num_shards, " with ", checkpoint.num_workers,
        " workers; this server is shard ", options_.shard, " of ",
        options_.num_shards, " with ", options_.num_workers, " workers"));
  }
  RETURN_IF_ERROR(ConfigureLocked(checkpoint.signature));
  std::vector<ChunkBarrier*> owned = OwnedChunksLocked();
  if (owned.size() != checkpoint.chunks.size()) {
    return absl::FailedPreconditionError(absl::StrCat(
        "the checkpoint holds ", checkpoint.chunks.size(),
        " chunks, this shard owns ", owned.size()));
  }
  for (size_t i = 0; i < owned.size(); ++i) {
    if (owned[i]->chunk().index != checkpoint.chunks[i].chunk) {
      return absl::FailedPreconditionError(absl::StrCat(
          "the checkpoint's chunk ", checkpoint.chunks[i].chunk,
          " is not this shard's chunk ", owned[i]->chunk().index));
    }
    RETURN_IF_ERROR(owned[i]->Restore(checkpoint.chunks[i]));
  }
  // The restored model is the job's: workers with another one are refused.
  signature_from_rank0_ = true;
  length_open_ = true;
  return absl::OkStatus();
}

}  // namespace lockstep
