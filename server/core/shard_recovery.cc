#include "server/core/shard_recovery.h"

#include <algorithm>
#include <string>
#include <utility>

#include "absl/strings/str_cat.h"

namespace lockstep {
namespace {

// "1,3": the ranks, for a message.
std::string RankList(const std::vector<int>& ranks) {
  std::string list;
  for (int r : ranks) absl::StrAppend(&list, list.empty() ? "" : ",", r);
  return list;
}

}  // namespace

ShardRecovery::ShardRecovery(const ParameterServerOptions& options,
                             StepBarriers* barriers, Membership* members)
    : options_(options), barriers_(barriers), members_(members) {}

std::optional<StepAlarm> ShardRecovery::OldestWait(
    absl::Span<ChunkBarrier* const> chunks, absl::Time now) const {
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

std::vector<StepAlarm> ShardRecovery::WarnOnce(const StepAlarm& alarm) {
  absl::MutexLock lock(&mu_);
  if (warned_step_ == alarm.step) return {};
  warned_step_ = alarm.step;
  return {alarm};
}

void ShardRecovery::GiveUpStep(const StepAlarm& alarm, bool fail_job,
                               absl::Span<ChunkBarrier* const> chunks) {
  const std::string ranks = RankList(alarm.missing);
  if (fail_job) {
    const absl::Status cancelled = absl::CancelledError(absl::StrCat(
        "the job failed: step ", alarm.step, " timed out waiting for rank(s) ",
        ranks, " (the job fails when a worker is lost)"));
    for (ChunkBarrier* c : chunks) c->Expire(alarm.step, cancelled);
    return;
  }
  // Evict those who never came, so a late push of theirs is refused and
  // they register again.
  members_->Evict(alarm.missing, alarm.step);
  if (alarm.ssp) {
    // The held pushes were applied, so nothing is given up: they are
    // answered once the evicted ranks are no longer waited for.
    for (ChunkBarrier* c : chunks) c->Excuse(alarm.missing);
    return;
  }
  // Give up on the step everywhere.
  const absl::Status aborted = absl::AbortedError(absl::StrCat(
      "step ", alarm.step, " timed out after ",
      absl::FormatDuration(alarm.waited), " waiting for rank(s) ", ranks,
      "; it was not applied: register again and push it again"));
  for (ChunkBarrier* c : chunks) c->Expire(alarm.step, aborted);
}

std::vector<StepAlarm> ShardRecovery::CheckStepTimeout(absl::Time now,
                                                       absl::Duration timeout,
                                                       bool fail_job) {
  const StepBarriers::Layout* layout = barriers_->layout();
  if (layout == nullptr) return {};
  std::optional<StepAlarm> alarm = OldestWait(layout->owned, now);
  if (!alarm.has_value() || alarm->waited < timeout / 2) return {};
  alarm->expired = alarm->waited >= timeout;
  alarm->ssp = layout->sync.mode == SyncMode::kSsp;
  if (!alarm->expired) return WarnOnce(*alarm);
  GiveUpStep(*alarm, fail_job, layout->owned);
  return {*alarm};
}

std::optional<ShardCheckpoint> ShardRecovery::TakePinned() {
  StepBarriers::View view = barriers_->Current();
  if (!view.signature.has_value() || view.owned.empty()) return std::nullopt;
  // The chunks pin the same versions and a pin is only ever taken with
  // all the others, so they line up once the last chunk has pinned.
  const int64_t version = view.owned.front()->PinnedVersion();
  for (ChunkBarrier* c : view.owned) {
    if (version < 0 || c->PinnedVersion() != version) return std::nullopt;
  }
  ShardCheckpoint checkpoint;
  checkpoint.signature = *std::move(view.signature);
  checkpoint.shard = options_.shard;
  checkpoint.num_shards = options_.num_shards;
  checkpoint.num_workers = options_.num_workers;
  checkpoint.version = version;
  for (ChunkBarrier* c : view.owned) {
    std::optional<ChunkState> state = c->TakePinned();
    if (!state.has_value()) return std::nullopt;  // Replaced meanwhile.
    checkpoint.chunks.push_back(*std::move(state));
  }
  return checkpoint;
}

absl::StatusOr<ShardCheckpoint> ShardRecovery::Snapshot(absl::Duration timeout,
                                                        bool lined_up) {
  StepBarriers::View view = barriers_->Current();
  if (!view.signature.has_value() || view.version < 0) {
    return absl::FailedPreconditionError(
        "nothing to checkpoint before version 0");
  }
  ShardCheckpoint checkpoint;
  checkpoint.signature = *std::move(view.signature);
  checkpoint.shard = options_.shard;
  checkpoint.num_shards = options_.num_shards;
  checkpoint.num_workers = options_.num_workers;
  const bool same_version =
      lined_up && checkpoint.signature.sync.mode == SyncMode::kSync;
  const absl::Time deadline = options_.env->Now() + timeout;
  while (true) {
    checkpoint.chunks.clear();
    int64_t low = -1, high = -1;
    for (ChunkBarrier* c : view.owned) {
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
      return absl::DeadlineExceededError(
          absl::StrCat("chunks stayed at versions ", low, "..", high,
                       " for the whole checkpoint timeout"));
    }
    options_.env->SleepFor(absl::Milliseconds(1));
  }
}

}  // namespace lockstep
