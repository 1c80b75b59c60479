#include "common/model/chunk_plan.h"

#include <algorithm>

#include "absl/strings/numbers.h"
#include "absl/strings/str_cat.h"

namespace lockstep {

int64_t AutoChunkBytes(int64_t num_elements, int num_shards) {
  const int64_t per_shard = std::max<int64_t>(num_elements, 0) *
                            static_cast<int64_t>(sizeof(float)) /
                            std::max(num_shards, 1);
  if (per_shard <= (int64_t{1} << 20)) return kDefaultChunkBytes;
  int64_t bytes = kMinAutoChunkBytes;
  while (bytes * 2 <= per_shard / 32 && bytes * 2 <= kDefaultChunkBytes) {
    bytes *= 2;
  }
  return bytes;
}

int64_t ResolveChunkBytes(int64_t chunk_bytes, int64_t num_elements,
                          int num_shards) {
  return chunk_bytes == kAutoChunkBytes
             ? AutoChunkBytes(num_elements, num_shards)
             : chunk_bytes;
}

absl::StatusOr<int64_t> ParseChunkBytes(absl::string_view text,
                                        int64_t max_bytes) {
  if (text == "auto") return kAutoChunkBytes;
  int64_t bytes = 0;
  if (!absl::SimpleAtoi(text, &bytes) || bytes < 4 || bytes > max_bytes) {
    return absl::InvalidArgumentError(
        absl::StrCat("chunk bytes must be auto or a count in [4, ", max_bytes,
                     "], got \"", text, "\""));
  }
  return bytes;
}

absl::StatusOr<ChunkPlan> ChunkPlan::Create(int64_t num_elements,
                                            int64_t chunk_bytes,
                                            int num_shards, int64_t num_state) {
  if (num_elements < 0 || num_state < 0) {
    return absl::InvalidArgumentError(
        absl::StrCat("negative element count ", num_elements));
  }
  if (chunk_bytes < static_cast<int64_t>(sizeof(float))) {
    return absl::InvalidArgumentError(absl::StrCat(
        "chunk_bytes must be at least ", sizeof(float), ", got ", chunk_bytes));
  }
  if (num_shards < 1) {
    return absl::InvalidArgumentError(
        absl::StrCat("num_shards must be at least 1, got ", num_shards));
  }
  ChunkPlan plan;
  plan.num_elements_ = num_elements;
  plan.num_shards_ = num_shards;
  plan.elements_per_chunk_ = chunk_bytes / static_cast<int64_t>(sizeof(float));
  if (num_shards > 1) {
    // Smaller chunks so that the shards share a small model (a model of
    // fewer than S (S - 1) values may still leave some shards none).
    const int64_t per_shard = (num_elements + num_shards - 1) / num_shards;
    plan.elements_per_chunk_ =
        std::max<int64_t>(1, std::min(plan.elements_per_chunk_, per_shard));
  }
  std::vector<int64_t> load(num_shards, 0);
  // Parameters first, then state, each cut on its own.
  auto cut = [&](int64_t begin, int64_t end, bool state) {
    for (int64_t offset = begin; offset < end;
         offset += plan.elements_per_chunk_) {
      Chunk chunk;
      chunk.index = static_cast<int>(plan.chunks_.size());
      chunk.offset = offset;
      chunk.size = std::min(plan.elements_per_chunk_, end - offset);
      chunk.shard = static_cast<int>(
          std::min_element(load.begin(), load.end()) - load.begin());
      chunk.state = state;
      load[chunk.shard] += chunk.size;
      plan.chunks_.push_back(chunk);
    }
  };
  cut(0, num_elements, false);
  cut(num_elements, num_elements + num_state, true);
  plan.num_elements_ = num_elements + num_state;
  return plan;
}

int64_t ChunkPlan::ShardElements(int shard) const {
  int64_t n = 0;
  for (const Chunk& c : chunks_) {
    if (c.shard == shard) n += c.size;
  }
  return n;
}

}  // namespace lockstep
