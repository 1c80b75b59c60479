#include "server/daemon/checkpointer.h"

#include <utility>

#include "absl/strings/str_cat.h"
#include "absl/time/clock.h"

namespace lockstep {

Checkpointer::Checkpointer(const Options& options, CheckpointStore* store,
                           ParameterServer* core, ServerTelemetry* telemetry,
                           DaemonLog log)
    : store_(store),
      core_(core),
      telemetry_(telemetry),
      log_(std::move(log)),
      schedule_(options.every_steps, options.every, absl::Now()) {}

absl::StatusOr<std::pair<std::string, int64_t>> Checkpointer::Save(
    absl::Duration wait) {
  absl::MutexLock lock(&mu_);
  absl::StatusOr<ShardCheckpoint> snapshot = core_->Snapshot(wait);
  if (!snapshot.ok()) return snapshot.status();
  absl::StatusOr<std::string> path = store_->Save(*snapshot);
  if (!path.ok()) return path.status();
  const absl::Time now = absl::Now();
  // Any save that works (lockstep_ctl's too) ends the retry delay.
  schedule_.Saved(snapshot->version, now);
  if (telemetry_ != nullptr)
    telemetry_->CheckpointSaved(snapshot->version, now);
  log_(
      absl::StrCat("checkpoint of version ", snapshot->version, " in ", *path));
  return std::make_pair(*path, snapshot->version);
}

void Checkpointer::SaveIfDue(absl::Time now) {
  const int64_t version = core_->GetStatus().version;
  {
    absl::MutexLock lock(&mu_);
    if (!schedule_.Due(version, now)) return;
  }
  absl::StatusOr<std::pair<std::string, int64_t>> saved = Save();
  if (saved.ok()) return;
  absl::Duration backoff;
  {
    absl::MutexLock lock(&mu_);
    backoff = schedule_.Failed(now);
  }
  log_(absl::StrCat("checkpoint failed: ", saved.status().ToString(),
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

int64_t Checkpointer::last_saved_version() {
  absl::MutexLock lock(&mu_);
  return schedule_.last_saved_version();
}

}  // namespace lockstep
