// `lockstep_ctl reshard`: a parameter-server job's checkpoints, saved with
// S shards, rewritten for S' shards, so that new servers started with
// --num_shards=S' --init_from=TO resume the job.
//
// Each shard's checkpoint holds its chunks of the flat parameter vector
// (weights and the optimizer's slots, element by element), and the chunks
// and their shards follow from (model, chunk size, shard count) alone
// (common/model/chunk_plan.h). So the S checkpoints of one version are laid
// out as one flat vector per slot, by each chunk's offset, checked to
// cover it exactly, and cut again with the plan of S' shards. The version
// is the newest one every shard of FROM holds (a cut the shards agree on);
// every chunk must be at it (sync jobs; async and SSP chunks drift apart
// and are refused). The optimizers are element-wise, so the job resumed
// with S' shards computes what it would have with S. The signatures must
// agree, but for the shard; the new one says S' and the chunk size the
// new job's workers will resolve (`chunk_bytes`: auto, as their default,
// or the size they are given). Nothing in FROM is changed; TO must hold no
// checkpoint.
#ifndef LOCKSTEP_SERVER_CTL_RESHARD_H_
#define LOCKSTEP_SERVER_CTL_RESHARD_H_

#include <cstdint>
#include <string>
#include <vector>

#include "absl/status/statusor.h"
#include "common/model/chunk_plan.h"

namespace lockstep {

struct ReshardOptions {
  std::string from;  // A --checkpoint_dir of the old job.
  std::string to;    // The folder the new job's --init_from names.
  int num_shards = 1;
  int64_t chunk_bytes = kAutoChunkBytes;
};

struct ReshardResult {
  int old_shards = 0;
  int64_t version = 0;
  std::vector<std::string> written;  // One file per new shard.
};

// INVALID_ARGUMENT for bad options, NOT_FOUND when FROM holds no shard
// folders or no version all of them hold, FAILED_PRECONDITION when the
// checkpoints disagree or do not cover the model, ALREADY_EXISTS when TO
// holds checkpoints; the cause of a read or write failure otherwise.
absl::StatusOr<ReshardResult> Reshard(const ReshardOptions& options);

}  // namespace lockstep

#endif  // LOCKSTEP_SERVER_CTL_RESHARD_H_
