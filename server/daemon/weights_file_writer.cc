#include "server/daemon/weights_file_writer.h"

#include <algorithm>
#include <utility>
#include <vector>

#include "absl/strings/str_cat.h"
#include "common/base/status_macros.h"
#include "common/formats/safetensors.h"

namespace lockstep {

WeightsFileWriter::WeightsFileWriter(std::string path, ParameterServer* core,
                                     Env* env, absl::Duration snapshot_wait,
                                     DaemonLog log)
    : path_(std::move(path)),
      core_(core),
      env_(env),
      snapshot_wait_(snapshot_wait),
      log_(std::move(log)) {}

absl::StatusOr<int64_t> WeightsFileWriter::Write() {
  absl::MutexLock lock(&mu_);
  ASSIGN_OR_RETURN(ShardCheckpoint snapshot, core_->Snapshot(snapshot_wait_));
  // One shard owns every chunk: in chunk order they are the flat vector.
  std::sort(snapshot.chunks.begin(), snapshot.chunks.end(),
            [](const ChunkState& a, const ChunkState& b) {
              return a.chunk < b.chunk;
            });
  std::vector<float> flat;
  for (const ChunkState& chunk : snapshot.chunks) {
    flat.insert(flat.end(), chunk.weights.begin(), chunk.weights.end());
  }
  std::vector<TensorInfo> tensors = snapshot.signature.tensors;
  tensors.insert(tensors.end(), snapshot.signature.state_tensors.begin(),
                 snapshot.signature.state_tensors.end());
  RETURN_IF_ERROR(WriteSafetensors(path_, tensors, flat, env_));
  log_(absl::StrCat("weights of version ", snapshot.version, " in ", path_));
  return snapshot.version;
}

}  // namespace lockstep
