// The Daemon's state on disk and its giving up: checkpoints (saved by the
// clock, on request and at the end; the newest intact one restored at
// start, a fresh start refused when only damaged ones are left), the
// weights file, and the exit when every worker is gone. The rest of the
// Daemon is daemon.cc.
#include <algorithm>
#include <optional>
#include <string>
#include <utility>
#include <vector>

#include "absl/strings/str_cat.h"
#include "absl/strings/str_join.h"
#include "absl/time/clock.h"
#include "common/base/exit_codes.h"
#include "common/base/status_macros.h"
#include "common/formats/safetensors.h"
#include "server/daemon/daemon.h"
#include "server/daemon/daemon_internal.h"

namespace lockstep {

using daemon_internal::kDrainCheckpointWait;
using daemon_internal::Log;

absl::StatusOr<int64_t> Daemon::WriteWeightsFile() {
  absl::MutexLock lock(&weights_mu_);
  absl::StatusOr<ShardCheckpoint> snapshot =
      core_->Snapshot(kDrainCheckpointWait);
  if (!snapshot.ok()) return snapshot.status();
  // One shard owns every chunk: in chunk order they are the flat vector.
  std::sort(snapshot->chunks.begin(), snapshot->chunks.end(),
            [](const ChunkState& a, const ChunkState& b) {
              return a.chunk < b.chunk;
            });
  std::vector<float> flat;
  for (const ChunkState& chunk : snapshot->chunks) {
    flat.insert(flat.end(), chunk.weights.begin(), chunk.weights.end());
  }
  std::vector<TensorInfo> tensors = snapshot->signature.tensors;
  tensors.insert(tensors.end(), snapshot->signature.state_tensors.begin(),
                 snapshot->signature.state_tensors.end());
  RETURN_IF_ERROR(WriteSafetensors(options_.weights_file, tensors, flat,
                                   options_.checkpoint_env));
  Log(absl::StrCat("weights of version ", snapshot->version, " in ",
                   options_.weights_file));
  return snapshot->version;
}

absl::StatusOr<std::pair<std::string, int64_t>> Daemon::SaveCheckpoint(
    absl::Duration wait) {
  if (checkpoints_ == nullptr) {
    return absl::FailedPreconditionError("no --checkpoint_dir");
  }
  absl::MutexLock lock(&checkpoint_mu_);
  absl::StatusOr<ShardCheckpoint> snapshot = core_->Snapshot(wait);
  if (!snapshot.ok()) return snapshot.status();
  absl::StatusOr<std::string> path = checkpoints_->Save(*snapshot);
  if (!path.ok()) return path.status();
  last_saved_version_ = snapshot->version;
  last_saved_ = absl::Now();
  // Any save that works (lockstep_ctl's too) ends the retry delay.
  checkpoint_backoff_ = absl::ZeroDuration();
  retry_checkpoint_at_ = absl::InfinitePast();
  if (telemetry_ != nullptr) {
    telemetry_->CheckpointSaved(snapshot->version, last_saved_);
  }
  Log(absl::StrCat("checkpoint of version ", snapshot->version, " in ", *path));
  return std::make_pair(*path, snapshot->version);
}

absl::Status Daemon::SaveUnsavedProgress() {
  if (checkpoints_ == nullptr) return absl::OkStatus();
  {
    absl::MutexLock lock(&checkpoint_mu_);
    if (last_saved_version_ >= core_->GetStatus().version) {
      return absl::OkStatus();
    }
  }
  return SaveCheckpoint().status();
}

std::optional<int> Daemon::CheckWorkersGone(absl::Time now) {
  if (options_.no_worker_timeout <= absl::ZeroDuration() ||
      core_->WaitUntilDone(absl::ZeroDuration())) {
    return std::nullopt;
  }
  absl::Time last = absl::InfinitePast();  // Of any worker's latest call.
  for (const WorkerActivity& w : core_->GetStatus().workers) {
    last = std::max(last, w.last_contact);
  }
  // Before the first call the job has not begun: workers may be slow to
  // start (pods pending), and nothing would be lost.
  if (last == absl::InfinitePast() || now - last < options_.no_worker_timeout) {
    return std::nullopt;
  }
  Log(absl::StrCat("no worker has called for ",
                   absl::FormatDuration(now - last),
                   " (--no_worker_timeout_s) and the job is unfinished: every "
                   "worker was lost and none replaced; exiting retryable"));
  if (absl::Status saved = SaveUnsavedProgress(); !saved.ok()) {
    Log(absl::StrCat("checkpoint before exiting failed: ", saved.ToString()));
  }
  core_->Shutdown(absl::UnavailableError(
      "the server gave up on the job: no worker called for too long"));
  return kExitRetryable;
}

absl::Status Daemon::RestoreInitFrom() {
  if (options_.init_from.empty()) return absl::OkStatus();
  absl::StatusOr<ShardCheckpoint> init = CheckpointStore::ReadForInit(
      options_.init_from, options_.shard, options_.num_shards,
      options_.checkpoint_env);
  absl::Status restored = init.status();
  if (init.ok()) restored = core_->Restore(*init);
  if (!restored.ok()) {
    Log(absl::StrCat("cannot start from --init_from=", options_.init_from, ": ",
                     restored.message()));
    return restored;
  }
  Log(absl::StrCat("starting from version ", init->version, " of ",
                   options_.init_from));
  return absl::OkStatus();
}

absl::Status Daemon::RestoreNewestCheckpoint() {
  if (checkpoints_ == nullptr) return RestoreInitFrom();
  std::vector<std::string> notes;
  absl::StatusOr<std::optional<ShardCheckpoint>> newest =
      checkpoints_->LoadNewest(&notes);
  for (const std::string& note : notes) Log(note);
  if (!newest.ok()) {
    Log(newest.status().ToString());
    return newest.status();
  }
  if (!newest->has_value()) {
    const std::vector<std::string> damaged = checkpoints_->SetAside();
    if (damaged.empty()) return RestoreInitFrom();  // A new job.
    if (options_.allow_fresh_start) {
      Log(absl::StrCat("no intact checkpoint in ", options_.checkpoint_dir,
                       " (", damaged.size(),
                       " damaged, set aside); starting from version 0 as "
                       "--allow_fresh_start asks"));
      return RestoreInitFrom();
    }
    const absl::Status refused = absl::DataLossError(absl::StrCat(
        "no intact checkpoint in ", options_.checkpoint_dir, ", only damaged "
        "ones: ", absl::StrJoin(damaged, ", "), ". Starting from version 0 "
        "would lose the job's progress: restore a good checkpoint into the "
        "folder, or pass --allow_fresh_start to start fresh"));
    Log(std::string(refused.message()));
    return refused;
  }
  if (absl::Status s = core_->Restore(**newest); !s.ok()) {
    Log(absl::StrCat("cannot restore the checkpoint in ",
                     options_.checkpoint_dir, ": ", s.message()));
    return s;
  }
  absl::MutexLock lock(&checkpoint_mu_);
  last_saved_version_ = (*newest)->version;
  telemetry_->CheckpointSaved((*newest)->version, absl::Now());
  Log(absl::StrCat("restored version ", (*newest)->version, " from ",
                   options_.checkpoint_dir));
  return absl::OkStatus();
}

}  // namespace lockstep
