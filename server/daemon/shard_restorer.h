// Where a starting shard's weights come from: the newest intact checkpoint
// in --checkpoint_dir; else --init_from's checkpoint (another job's); else
// version 0 from the workers. When the folder holds only damaged
// checkpoints (set aside as *.corrupt) a fresh start would lose the job's
// progress, so it is refused (DATA_LOSS) unless allow_fresh_start.
//
// Owns nothing; the store (may be null: no --checkpoint_dir), core and Env
// are not owned. Used once, from the thread that starts the server
// (thread-compatible).
#ifndef LOCKSTEP_SERVER_DAEMON_SHARD_RESTORER_H_
#define LOCKSTEP_SERVER_DAEMON_SHARD_RESTORER_H_

#include <cstdint>
#include <optional>
#include <string>

#include "absl/status/status.h"
#include "absl/status/statusor.h"
#include "common/base/env.h"
#include "server/core/checkpoint.h"
#include "server/core/parameter_server.h"
#include "server/daemon/daemon_log.h"

namespace lockstep {

class ShardRestorer final {
 public:
  struct Options {
    std::string checkpoint_dir;  // What the log names; the store reads it.
    std::string init_from;       // Empty: none.
    int shard = 0;
    int num_shards = 1;
    bool allow_fresh_start = false;
    Env* env = Env::Default();  // init_from's reads. Not owned.
  };

  ShardRestorer(Options options, CheckpointStore* store, ParameterServer* core,
                DaemonLog log);

  // Restores the core as above (each step said in the log). Returns the
  // version restored from the checkpoint folder, nullopt when the shard
  // starts otherwise; an error (logged) when it must not start.
  absl::StatusOr<std::optional<int64_t>> Restore();

 private:
  // Restores init_from's checkpoint (OK when init_from is empty).
  absl::Status RestoreInitFrom();

  const Options options_;
  CheckpointStore* const store_;  // Not owned; may be null.
  ParameterServer* const core_;   // Not owned.
  const DaemonLog log_;
};

}  // namespace lockstep

#endif  // LOCKSTEP_SERVER_DAEMON_SHARD_RESTORER_H_
