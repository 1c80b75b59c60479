#include "common/model/chunk_plan.h"

#include <algorithm>
#include <cstdint>
#include <cstring>
#include <limits>
#include <string>
#include <vector>

#include "absl/base/casts.h"
#include "absl/status/status.h"
#include "absl/status/statusor.h"
#include "absl/types/span.h"
#include "common/base/random.h"
#include "common/wire/wire_codec.h"
#include "gmock/gmock.h"
#include "gtest/gtest.h"

namespace lockstep {
namespace {

using ::testing::HasSubstr;

// Element counts around the chunk size: empty, one element, one short of a
// chunk, exactly a chunk, one over, and two chunks plus a ragged tail.
std::vector<int64_t> OddSizes(int64_t per_chunk) {
  return {0, 1, per_chunk - 1, per_chunk, per_chunk + 1, 2 * per_chunk + 3};
}

// Random values in ±[0.5, 2): never zero, so a missed element (left at the
// zero the receiving vector starts with) cannot go unnoticed.
std::vector<float> RandomNonZero(int64_t n, uint64_t seed) {
  Random random(seed);
  std::vector<float> values(n);
  for (float& v : values) {
    v = random.Uniform(0.5f, 2.0f);
    if (random.Next() & 1) v = -v;
  }
  return values;
}

TEST(ChunkPlanTest, ChunksTileTheVectorInOrder) {
  for (int64_t chunk_bytes : {4, 12, 16, 4096}) {
    const int64_t per_chunk = chunk_bytes / 4;
    for (int64_t n : OddSizes(per_chunk)) {
      SCOPED_TRACE(testing::Message() << "chunk_bytes=" << chunk_bytes
                                      << " n=" << n);
      absl::StatusOr<ChunkPlan> plan = ChunkPlan::Create(n, chunk_bytes);
      ASSERT_TRUE(plan.ok()) << plan.status();
      EXPECT_EQ(plan->num_elements(), n);
      EXPECT_EQ(plan->elements_per_chunk(), per_chunk);
      const int64_t expected_chunks = (n + per_chunk - 1) / per_chunk;
      ASSERT_EQ(plan->num_chunks(), expected_chunks);
      ASSERT_EQ(static_cast<int64_t>(plan->chunks().size()), expected_chunks);

      int64_t next = 0;
      for (int i = 0; i < plan->num_chunks(); ++i) {
        const Chunk& chunk = plan->chunks()[i];
        EXPECT_EQ(chunk.index, i);
        EXPECT_EQ(chunk.offset, next);
        EXPECT_GT(chunk.size, 0);
        if (i + 1 < plan->num_chunks()) {
          EXPECT_EQ(chunk.size, per_chunk);
        } else {
          EXPECT_LE(chunk.size, per_chunk);
          EXPECT_EQ(chunk.size, n - per_chunk * (expected_chunks - 1));
        }
        next = chunk.offset + chunk.size;
      }
      EXPECT_EQ(next, n);
    }
  }
}

TEST(ChunkPlanTest, KnownPlanForSixteenByteChunks) {
  // 11 = 2 * 4 + 3 elements: two full chunks of 4 and a tail of 3.
  absl::StatusOr<ChunkPlan> plan = ChunkPlan::Create(11, 16);
  ASSERT_TRUE(plan.ok()) << plan.status();
  ASSERT_EQ(plan->num_chunks(), 3);
  const int64_t offsets[] = {0, 4, 8};
  const int64_t sizes[] = {4, 4, 3};
  for (int i = 0; i < 3; ++i) {
    EXPECT_EQ(plan->chunks()[i].index, i);
    EXPECT_EQ(plan->chunks()[i].offset, offsets[i]);
    EXPECT_EQ(plan->chunks()[i].size, sizes[i]);
  }
}

TEST(ChunkPlanTest, EmptyVectorHasNoChunks) {
  absl::StatusOr<ChunkPlan> plan = ChunkPlan::Create(0, 16);
  ASSERT_TRUE(plan.ok()) << plan.status();
  EXPECT_EQ(plan->num_chunks(), 0);
  EXPECT_TRUE(plan->chunks().empty());
  EXPECT_EQ(plan->num_elements(), 0);
  EXPECT_EQ(plan->elements_per_chunk(), 4);
}

TEST(ChunkPlanTest, ChunkLargerThanVectorGivesOneChunk) {
  absl::StatusOr<ChunkPlan> plan = ChunkPlan::Create(10, int64_t{4} << 20);
  ASSERT_TRUE(plan.ok()) << plan.status();
  ASSERT_EQ(plan->num_chunks(), 1);
  EXPECT_EQ(plan->chunks()[0].offset, 0);
  EXPECT_EQ(plan->chunks()[0].size, 10);
  EXPECT_EQ(plan->elements_per_chunk(), int64_t{1} << 20);
}

TEST(ChunkPlanTest, RoundTripThroughWireCodecIsBitExact) {
  uint64_t seed = 1;
  for (int64_t chunk_bytes : {4, 12, 16, 4096}) {
    for (int64_t n : OddSizes(chunk_bytes / 4)) {
      SCOPED_TRACE(testing::Message() << "chunk_bytes=" << chunk_bytes
                                      << " n=" << n);
      absl::StatusOr<ChunkPlan> plan = ChunkPlan::Create(n, chunk_bytes);
      ASSERT_TRUE(plan.ok()) << plan.status();
      const std::vector<float> original = RandomNonZero(n, seed++);
      const absl::Span<const float> source(original);

      std::vector<float> received(n, 0.0f);
      for (const Chunk& chunk : plan->chunks()) {
        std::string payload;
        EncodeFloat32(source.subspan(chunk.offset, chunk.size), &payload);
        ASSERT_EQ(static_cast<int64_t>(payload.size()),
                  chunk.size * static_cast<int64_t>(sizeof(float)));
        EXPECT_LE(static_cast<int64_t>(payload.size()), chunk_bytes);
        absl::Status status = DecodeFloat32(
            payload, absl::MakeSpan(received).subspan(chunk.offset, chunk.size));
        ASSERT_TRUE(status.ok()) << status;
      }

      for (int64_t i = 0; i < n; ++i) {
        ASSERT_EQ(absl::bit_cast<uint32_t>(received[i]),
                  absl::bit_cast<uint32_t>(original[i]))
            << "element " << i;
      }
      if (n > 0) {
        EXPECT_EQ(std::memcmp(received.data(), original.data(),
                              n * sizeof(float)),
                  0);
      }
    }
  }
}

TEST(ChunkPlanTest, RejectsNegativeElementCount) {
  for (int64_t n : {int64_t{-1}, int64_t{-17},
                    std::numeric_limits<int64_t>::min()}) {
    absl::StatusOr<ChunkPlan> plan = ChunkPlan::Create(n, 16);
    EXPECT_EQ(plan.status().code(), absl::StatusCode::kInvalidArgument) << n;
    EXPECT_THAT(plan.status().message(), HasSubstr("negative element count"))
        << n;
  }
}

TEST(ChunkPlanTest, RejectsChunkSmallerThanOneFloat) {
  for (int64_t chunk_bytes : {int64_t{3}, int64_t{1}, int64_t{0}, int64_t{-4},
                              std::numeric_limits<int64_t>::min()}) {
    absl::StatusOr<ChunkPlan> plan = ChunkPlan::Create(10, chunk_bytes);
    EXPECT_EQ(plan.status().code(), absl::StatusCode::kInvalidArgument)
        << chunk_bytes;
    EXPECT_THAT(plan.status().message(), HasSubstr("chunk_bytes"))
        << chunk_bytes;
  }
  // Even an empty vector needs a valid chunk size.
  EXPECT_EQ(ChunkPlan::Create(0, 0).status().code(),
            absl::StatusCode::kInvalidArgument);
  // The smallest valid chunk holds one element.
  absl::StatusOr<ChunkPlan> plan = ChunkPlan::Create(3, 4);
  ASSERT_TRUE(plan.ok()) << plan.status();
  EXPECT_EQ(plan->num_chunks(), 3);
}

TEST(ChunkPlanTest, ChunkBytesRoundDownToWholeFloats) {
  for (int64_t chunk_bytes : {16, 17, 18, 19}) {
    absl::StatusOr<ChunkPlan> plan = ChunkPlan::Create(10, chunk_bytes);
    ASSERT_TRUE(plan.ok()) << plan.status();
    EXPECT_EQ(plan->elements_per_chunk(), 4) << chunk_bytes;
    ASSERT_EQ(plan->num_chunks(), 3) << chunk_bytes;
    EXPECT_EQ(plan->chunks()[0].size, 4);
    EXPECT_EQ(plan->chunks()[1].offset, 4);
    EXPECT_EQ(plan->chunks()[2].offset, 8);
    EXPECT_EQ(plan->chunks()[2].size, 2);
  }
  // 7 bytes hold a single float.
  absl::StatusOr<ChunkPlan> plan = ChunkPlan::Create(2, 7);
  ASSERT_TRUE(plan.ok()) << plan.status();
  EXPECT_EQ(plan->elements_per_chunk(), 1);
  EXPECT_EQ(plan->num_chunks(), 2);
}

}  // namespace
}  // namespace lockstep

namespace lockstep {
namespace {

TEST(ChunkPlanShardsTest, EveryShardGetsChunksBalancedByBytes) {
  // 10 elements, 3 shards: chunks of min(4, ceil(10/3) = 4) = 4 elements.
  absl::StatusOr<ChunkPlan> plan = ChunkPlan::Create(10, 16, 3);
  ASSERT_TRUE(plan.ok());
  ASSERT_EQ(plan->num_chunks(), 3);
  EXPECT_EQ(plan->chunks()[0].shard, 0);
  EXPECT_EQ(plan->chunks()[1].shard, 1);
  EXPECT_EQ(plan->chunks()[2].shard, 2);
  EXPECT_EQ(plan->ShardElements(0) + plan->ShardElements(1) +
                plan->ShardElements(2),
            10);
  // Many chunks: greedy least-loaded keeps shards within one chunk.
  plan = ChunkPlan::Create(1000, 40, 3);
  ASSERT_TRUE(plan.ok());
  int64_t lo = plan->ShardElements(0), hi = lo;
  for (int s = 1; s < 3; ++s) {
    lo = std::min(lo, plan->ShardElements(s));
    hi = std::max(hi, plan->ShardElements(s));
  }
  EXPECT_LE(hi - lo, plan->elements_per_chunk());
  // The smaller last chunk goes to the least-loaded shard: 5 elements in
  // chunks of 2 over 2 shards: [2]->0, [2]->1, [1]->0.
  plan = ChunkPlan::Create(5, 8, 2);
  ASSERT_TRUE(plan.ok());
  EXPECT_EQ(plan->elements_per_chunk(), 2);
  ASSERT_EQ(plan->num_chunks(), 3);
  EXPECT_EQ(plan->chunks()[2].shard, 0);
  EXPECT_EQ(ChunkPlan::Create(5, 8, 0).status().code(),
            absl::StatusCode::kInvalidArgument);
}

}  // namespace
}  // namespace lockstep
