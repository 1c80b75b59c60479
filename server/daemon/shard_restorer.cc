#include "server/daemon/shard_restorer.h"

#include <utility>
#include <vector>

#include "absl/strings/str_cat.h"
#include "absl/strings/str_join.h"
#include "common/base/status_macros.h"

namespace lockstep {

ShardRestorer::ShardRestorer(Options options, CheckpointStore* store,
                             ParameterServer* core, DaemonLog log)
    : options_(std::move(options)),
      store_(store),
      core_(core),
      log_(std::move(log)) {}

absl::Status ShardRestorer::RestoreInitFrom() {
  if (options_.init_from.empty()) return absl::OkStatus();
  absl::StatusOr<ShardCheckpoint> init = CheckpointStore::ReadForInit(
      options_.init_from, options_.shard, options_.num_shards, options_.env);
  absl::Status restored = init.status();
  if (init.ok()) restored = core_->Restore(*init);
  if (!restored.ok()) {
    log_(absl::StrCat("cannot start from --init_from=", options_.init_from,
                      ": ", restored.message()));
    return restored;
  }
  log_(absl::StrCat("starting from version ", init->version, " of ",
                    options_.init_from));
  return absl::OkStatus();
}

absl::StatusOr<std::optional<int64_t>> ShardRestorer::Restore() {
  const std::optional<int64_t> none;
  if (store_ == nullptr) {
    RETURN_IF_ERROR(RestoreInitFrom());
    return none;
  }
  std::vector<std::string> notes;
  absl::StatusOr<std::optional<ShardCheckpoint>> newest =
      store_->LoadNewest(&notes);
  for (const std::string& note : notes) log_(note);
  if (!newest.ok()) {
    log_(newest.status().ToString());
    return newest.status();
  }
  if (!newest->has_value()) {
    const std::vector<std::string> damaged = store_->SetAside();
    if (!damaged.empty() && !options_.allow_fresh_start) {
      const absl::Status refused = absl::DataLossError(absl::StrCat(
          "no intact checkpoint in ", options_.checkpoint_dir,
          ", only damaged ones: ", absl::StrJoin(damaged, ", "),
          ". Starting from version 0 would lose the job's progress: restore "
          "a good checkpoint into the folder, or pass --allow_fresh_start to "
          "start fresh"));
      log_(std::string(refused.message()));
      return refused;
    }
    if (!damaged.empty()) {
      log_(absl::StrCat("no intact checkpoint in ", options_.checkpoint_dir,
                        " (", damaged.size(),
                        " damaged, set aside); starting from version 0 as "
                        "--allow_fresh_start asks"));
    }
    RETURN_IF_ERROR(RestoreInitFrom());  // A new job, or a fresh start.
    return none;
  }
  if (absl::Status s = core_->Restore(**newest); !s.ok()) {
    log_(absl::StrCat("cannot restore the checkpoint in ",
                      options_.checkpoint_dir, ": ", s.message()));
    return s;
  }
  log_(absl::StrCat("restored version ", (*newest)->version, " from ",
                    options_.checkpoint_dir));
  return (*newest)->version;
}

}  // namespace lockstep
