// How the flat parameter vector is cut into chunks and spread over shards.
//
// ChunkPlan is an immutable value: chunk i covers elements
// [offset, offset + size) of the flat fp32 vector and lives on server shard
// `shard`. Chunks hold floor(chunk_bytes / 4) elements -- with several
// shards at most ceil(N / num_shards), so that the shards share the model
// -- and the last one may hold fewer. That can leave some shards no chunk
// when N < num_shards (num_shards - 1) (8 values over 5 shards: four
// chunks of 2; ShardElements tells): such a shard is never initialized
// and never holds a version, and workers leave it out of the job's
// (RegisterResult). Each chunk in order goes to the shard
// holding the fewest bytes so far (the lowest index on ties): balanced by
// bytes, and computed the same way by every process from
// (num_elements, chunk_bytes, num_shards) alone, so a chunk travels by its
// index.
#ifndef LOCKSTEP_COMMON_MODEL_CHUNK_PLAN_H_
#define LOCKSTEP_COMMON_MODEL_CHUNK_PLAN_H_

#include <cstdint>
#include <vector>

#include "absl/status/statusor.h"
#include "absl/strings/string_view.h"
#include "common/model/model_signature.h"

namespace lockstep {

struct Chunk {
  int index = 0;
  int64_t offset = 0;  // In elements of the flat vector.
  int64_t size = 0;    // In elements; > 0.
  int shard = 0;       // The server shard that owns it.
  // Part of the model's state (batch-norm moving statistics), which servers
  // average rather than optimize.
  bool state = false;
};

// The chunk size `--chunk_bytes=auto` picks for `num_elements` fp32 values
// over `num_shards` shards, so that a shard's two link directions work at
// once: a shard answers a chunk only once every worker's copy of it has
// arrived, so the last chunk's replies (and the first chunk's arrival) are
// time the link in the other direction waits, n x chunk / B at the end of
// each step. About 32 chunks per shard keep that near 3% of the step
// (docs/study.md measures 4 MiB to 128 KiB): the largest power of two
// <= per-shard bytes / 32, at least kMinAutoChunkBytes (smaller chunks cost
// more in per-RPC work than they save) and at most kDefaultChunkBytes.
// A model of at most 1 MiB per shard keeps one chunk per shard: its step is
// latency, not bandwidth.
inline constexpr int64_t kMinAutoChunkBytes = int64_t{256} << 10;
int64_t AutoChunkBytes(int64_t num_elements, int num_shards);

// `chunk_bytes` as a flag or option gives it: kAutoChunkBytes means
// AutoChunkBytes, anything else is taken as it is.
inline constexpr int64_t kAutoChunkBytes = 0;
int64_t ResolveChunkBytes(int64_t chunk_bytes, int64_t num_elements,
                          int num_shards);

// "auto" or a byte count in [4, max_bytes]; INVALID_ARGUMENT otherwise.
absl::StatusOr<int64_t> ParseChunkBytes(absl::string_view text,
                                        int64_t max_bytes);

class ChunkPlan final {
 public:
  // Fails for negative sizes, a chunk smaller than one fp32 element, or
  // fewer than one shard.
  // The flat vector holds `num_elements` trainable parameters followed by
  // `num_state` state values; no chunk mixes the two.
  static absl::StatusOr<ChunkPlan> Create(int64_t num_elements,
                                          int64_t chunk_bytes,
                                          int num_shards = 1,
                                          int64_t num_state = 0);

  const std::vector<Chunk>& chunks() const { return chunks_; }
  int num_chunks() const { return static_cast<int>(chunks_.size()); }
  // Parameters and state together: the length of the flat vector.
  int64_t num_elements() const { return num_elements_; }
  int64_t elements_per_chunk() const { return elements_per_chunk_; }
  int num_shards() const { return num_shards_; }
  // Elements owned by `shard`.
  int64_t ShardElements(int shard) const;

 private:
  ChunkPlan() = default;
  int64_t num_elements_ = 0;
  int64_t elements_per_chunk_ = 0;
  int num_shards_ = 1;
  std::vector<Chunk> chunks_;
};

}  // namespace lockstep

#endif  // LOCKSTEP_COMMON_MODEL_CHUNK_PLAN_H_
