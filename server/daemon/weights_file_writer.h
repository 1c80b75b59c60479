// Writes the model of a one-shard job as a safetensors file (--weights_file):
// at the job's end and on request (lockstep_ctl checkpoint). The
// parameters and then the state tensors, in the signature's order.
//
// Owns nothing but its lock; the core and Env are not owned and must
// outlive it. Thread-safe: mu_ makes the writes one at a time, so two
// requests never interleave on the file.
#ifndef LOCKSTEP_SERVER_DAEMON_WEIGHTS_FILE_WRITER_H_
#define LOCKSTEP_SERVER_DAEMON_WEIGHTS_FILE_WRITER_H_

#include <cstdint>
#include <string>

#include "absl/status/statusor.h"
#include "absl/synchronization/mutex.h"
#include "absl/time/time.h"
#include "common/base/env.h"
#include "server/core/parameter_server.h"
#include "server/daemon/daemon_log.h"

namespace lockstep {

class WeightsFileWriter final {
 public:
  // Snapshots wait up to `snapshot_wait` for the chunks to line up.
  WeightsFileWriter(std::string path, ParameterServer* core, Env* env,
                    absl::Duration snapshot_wait, DaemonLog log);

  // Writes the newest version's weights to path(); returns that version.
  absl::StatusOr<int64_t> Write() ABSL_LOCKS_EXCLUDED(mu_);

  const std::string& path() const { return path_; }

 private:
  const std::string path_;
  ParameterServer* const core_;  // Not owned.
  Env* const env_;               // Not owned.
  const absl::Duration snapshot_wait_;
  const DaemonLog log_;
  absl::Mutex mu_;  // One write at a time.
};

}  // namespace lockstep

#endif  // LOCKSTEP_SERVER_DAEMON_WEIGHTS_FILE_WRITER_H_
