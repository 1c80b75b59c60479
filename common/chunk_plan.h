// How the flat parameter vector is cut into chunks for the wire.
//
// ChunkPlan is an immutable value: chunk i covers elements
// [offset, offset + size) of the flat fp32 vector. Every chunk but the last
// holds exactly floor(chunk_bytes / 4) elements, so every process derives the
// same plan from (num_elements, chunk_bytes) alone and a chunk travels by its
// index. Later, shards own chunks by index (balanced by bytes).
#ifndef LOCKSTEP_COMMON_CHUNK_PLAN_H_
#define LOCKSTEP_COMMON_CHUNK_PLAN_H_

#include <cstdint>
#include <vector>

#include "absl/status/statusor.h"

namespace lockstep {

struct Chunk {
  int index = 0;
  int64_t offset = 0;  // In elements of the flat vector.
  int64_t size = 0;    // In elements; > 0.
};

class ChunkPlan final {
 public:
  // Fails for negative sizes or a chunk smaller than one fp32 element.
  static absl::StatusOr<ChunkPlan> Create(int64_t num_elements,
                                          int64_t chunk_bytes);

  const std::vector<Chunk>& chunks() const { return chunks_; }
  int num_chunks() const { return static_cast<int>(chunks_.size()); }
  int64_t num_elements() const { return num_elements_; }
  int64_t elements_per_chunk() const { return elements_per_chunk_; }

 private:
  ChunkPlan() = default;
  int64_t num_elements_ = 0;
  int64_t elements_per_chunk_ = 0;
  std::vector<Chunk> chunks_;
};

}  // namespace lockstep

#endif  // LOCKSTEP_COMMON_CHUNK_PLAN_H_
