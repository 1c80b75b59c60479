#include "common/chunk_plan.h"

#include <algorithm>

#include "absl/strings/str_cat.h"

namespace lockstep {

absl::StatusOr<ChunkPlan> ChunkPlan::Create(int64_t num_elements,
                                            int64_t chunk_bytes) {
  if (num_elements < 0) {
    return absl::InvalidArgumentError(
        absl::StrCat("negative element count ", num_elements));
  }
  if (chunk_bytes < static_cast<int64_t>(sizeof(float))) {
    return absl::InvalidArgumentError(absl::StrCat(
        "chunk_bytes must be at least ", sizeof(float), ", got ", chunk_bytes));
  }
  ChunkPlan plan;
  plan.num_elements_ = num_elements;
  plan.elements_per_chunk_ = chunk_bytes / static_cast<int64_t>(sizeof(float));
  for (int64_t offset = 0; offset < num_elements;
       offset += plan.elements_per_chunk_) {
    Chunk chunk;
    chunk.index = static_cast<int>(plan.chunks_.size());
    chunk.offset = offset;
    chunk.size = std::min(plan.elements_per_chunk_, num_elements - offset);
    plan.chunks_.push_back(chunk);
  }
  return plan;
}

}  // namespace lockstep
