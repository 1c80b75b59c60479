#include "server/daemon/checkpointer.h"

#include <utility>

#include "absl/strings/str_cat.h"
#include "absl/time/clock.h"
#include "common/base/status_macros.h"

namespace lockstep {

Checkpointer::Checkpointer(const Options& options, CheckpointStore* store,
                           ParameterServer* core, ServerTelemetry* telemetry,
                           DaemonLog log)
    : store_(store),
      core_(core),
      telemetry_(telemetry),
      log_(std::move(log)),
      schedule_(options.every_steps, options.every, absl::Now()),
      every_steps_(options.every_steps) {}

absl::StatusOr<std::pair<std::string, int64_t>> Checkpointer::Save(
    absl::Duration wait) {
  absl::MutexLock lock(&mu_);
  absl::StatusOr<ShardCheckpoint> snapshot = core_->Snapshot(wait);
  if (!snapshot.ok()) return snapshot.status();
  return WriteLocked(*snapshot);
}

absl::StatusOr<std::pair<std::string, int64_t>> Checkpointer::WriteLocked(
    const ShardCheckpoint& snapshot) {
  absl::StatusOr<std::string> path = store_->Save(snapshot);
  if (!path.ok()) return path.status();
  const absl::Time now = absl::Now();
  // Any save that works (lockstep_ctl's too) ends the retry delay.
  schedule_.Saved(snapshot.version, now);
  if (telemetry_ != nullptr) telemetry_->CheckpointSaved(snapshot.version, now);
  log_(absl::StrCat("checkpoint of version ", snapshot.version, " in ", *path));
  return std::make_pair(*path, snapshot.version);
}

std::optional<absl::StatusOr<std::pair<std::string, int64_t>>>
Checkpointer::SavePinned(absl::Time now) {
  // Taken under the lock: a step back (below) replaces the pins' barriers.
  absl::MutexLock lock(&mu_);
  std::optional<ShardCheckpoint> pinned = core_->TakePinned();
  if (!pinned.has_value()) return std::nullopt;
  // Restored or saved already, or a failed save's delay still runs. One
  // older than a save by the clock is still written: the other shards
  // save it too.
  if (pinned->version == schedule_.last_saved_version() ||
      schedule_.Retrying(now)) {
    return std::nullopt;
  }
  return WriteLocked(*pinned);
}

void Checkpointer::ReportSkipped() {
  const int64_t skipped = core_->PinsSkipped();
  {
    absl::MutexLock lock(&mu_);
    if (skipped <= skipped_said_) return;
    skipped_said_ = skipped;
  }
  log_(absl::StrCat(
      "a checkpoint at a multiple of --checkpoint_every_steps=", every_steps_,
      " was skipped (", skipped,
      " chunk version(s) so far): the one before was still being written. "
      "Shards that skip different versions share fewer checkpoints to "
      "recover from; raise --checkpoint_every_steps"));
}

void Checkpointer::SaveIfDue(absl::Time now) {
  const int64_t version = core_->GetStatus().version;
  // Sync mode: the step trigger's versions are pinned as they are
  // published, the same on every shard.
  const bool pinned_steps = every_steps_ > 0 && core_->PinsCheckpoints();
  std::optional<absl::StatusOr<std::pair<std::string, int64_t>>> saved;
  if (pinned_steps) {
    saved = SavePinned(now);
    ReportSkipped();
  }
  if (!saved.has_value()) {
    {
      absl::MutexLock lock(&mu_);
      if (!schedule_.Due(version, now, /*by_steps=*/!pinned_steps)) {
        return;
      }
    }
    saved = Save();
  }
  if (saved->ok()) return;
  absl::Duration backoff;
  {
    absl::MutexLock lock(&mu_);
    backoff = schedule_.Failed(now);
  }
  log_(absl::StrCat("checkpoint failed: ", saved->status().ToString(),
                    "; next try in ", absl::FormatDuration(backoff)));
}

absl::Status Checkpointer::SaveUnsaved() {
  {
    absl::MutexLock lock(&mu_);
    if (schedule_.last_saved_version() >= core_->GetStatus().version) {
      return absl::OkStatus();
    }
  }
  return Save().status();
}

void Checkpointer::Restored(int64_t version) {
  absl::MutexLock lock(&mu_);
  schedule_.Restored(version);
  if (telemetry_ != nullptr) telemetry_->CheckpointSaved(version, absl::Now());
}

absl::StatusOr<int64_t> Checkpointer::StepBack(int rank, int64_t incarnation,
                                               int64_t from, int64_t to) {
  absl::MutexLock lock(&mu_);
  absl::StatusOr<ShardCheckpoint> checkpoint = store_->Load(to);
  if (absl::IsNotFound(checkpoint.status())) {
    // A request made before another rank's step back set `to` aside is
    // stale, not impossible: that rank registers again and finds the
    // shards level (ParameterServer::StepBack answers the same).
    const int64_t version = core_->GetStatus().version;
    if (version < from) {
      return absl::AbortedError(absl::StrCat(
          "the shard is at version ", version, ", not at or past ", from,
          " any more (another rank stepped it back): register again"));
    }
    std::string held;
    for (int64_t v : store_->Versions()) {
      absl::StrAppend(&held, held.empty() ? "" : ", ", v);
    }
    return absl::FailedPreconditionError(
        absl::StrCat(checkpoint.status().message(), " (it holds ",
                     held.empty() ? "none" : held, ")"));
  }
  if (!checkpoint.ok()) return checkpoint.status();
  RETURN_IF_ERROR(core_->StepBack(rank, incarnation, from, *checkpoint));
  for (const std::string& aside : store_->SetAsideAfter(to)) {
    log_(absl::StrCat("set aside ", aside,
                      ": the job computes that version again"));
  }
  schedule_.Restored(to);
  if (telemetry_ != nullptr) telemetry_->CheckpointSaved(to, absl::Now());
  log_(absl::StrCat("stepped back to version ", to, " from ", from, " at rank ",
                    rank,
                    "'s request: the newest version every shard holds (a "
                    "shard restarted from an older checkpoint); the steps "
                    "since are computed again"));
  return to;
}

int64_t Checkpointer::last_saved_version() {
  absl::MutexLock lock(&mu_);
  return schedule_.last_saved_version();
}

}  // namespace lockstep
