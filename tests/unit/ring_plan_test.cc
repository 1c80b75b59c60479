#include "worker/exchange/allreduce/ring_plan.h"

#include <cstdint>
#include <vector>

#include "gtest/gtest.h"

namespace lockstep {
namespace {

TEST(RingPlanTest, SegmentsTileTheVectorFirstOnesLarger) {
  for (int n : {1, 2, 3, 4, 7}) {
    for (size_t len :
         {size_t{0}, size_t{1}, size_t{6}, size_t{7}, size_t{1000003}}) {
      RingPlan plan(n, 0, len, 5);
      size_t next = 0;
      for (int k = 0; k < n; ++k) {
        const RingPlan::Range seg = plan.Segment(k);
        EXPECT_EQ(seg.offset, next) << "n=" << n << " len=" << len;
        EXPECT_TRUE(seg.size == len / n || seg.size == len / n + 1);
        if (k > 0) {
          EXPECT_LE(seg.size, plan.Segment(k - 1).size);
        }
        next += seg.size;
      }
      EXPECT_EQ(next, len);
    }
  }
}

TEST(RingPlanTest, ChunksTileEachSegment) {
  RingPlan plan(3, 1, 23, 4);  // Segments of 8, 8, 7: chunks 4+4, 4+4, 4+3.
  EXPECT_EQ(plan.NumChunks(0), 2);
  EXPECT_EQ(plan.NumChunks(2), 2);
  EXPECT_EQ(plan.Chunk(2, 0).offset, 16u);
  EXPECT_EQ(plan.Chunk(2, 1).offset, 20u);
  EXPECT_EQ(plan.Chunk(2, 1).size, 3u);
  RingPlan tiny(4, 0, 1, 4);  // One element: only segment 0 has a chunk.
  EXPECT_EQ(tiny.NumChunks(0), 1);
  EXPECT_EQ(tiny.NumChunks(1), 0);
  EXPECT_EQ(tiny.NumChunks(3), 0);
}

TEST(RingPlanTest, WhatRankRSendsIsWhatItsRightNeighbourReceives) {
  for (int n : {2, 3, 4, 5}) {
    for (int r = 0; r < n; ++r) {
      RingPlan plan(n, r, 1000, 7);
      RingPlan right(n, (r + 1) % n, 1000, 7);
      EXPECT_EQ(plan.num_steps(), 2 * (n - 1));
      for (int t = 0; t < plan.num_steps(); ++t) {
        EXPECT_EQ(plan.SendSegment(t), right.RecvSegment(t));
        // A chunk received at step t is sent on at step t + 1.
        if (t + 1 < plan.num_steps()) {
          EXPECT_EQ(plan.RecvSegment(t), plan.SendSegment(t + 1));
        }
      }
      EXPECT_EQ(plan.NumSends(), right.NumReceives());
    }
  }
}

// Simulates the ring on sets of contributions: after the reduce-scatter,
// rank r holds every rank's contribution to segment r + 1, and after the
// all-gather every rank holds every rank's contribution to every segment,
// each segment's sum having been formed at exactly one rank.
TEST(RingPlanTest, RingOfSetsEndsWithEveryContributionEverywhere) {
  for (int n : {2, 3, 4, 6}) {
    const uint32_t all = (1u << n) - 1;
    // held[r][k]: the ranks whose values rank r's segment k includes.
    std::vector<std::vector<uint32_t>> held(n, std::vector<uint32_t>(n));
    for (int r = 0; r < n; ++r) {
      for (int k = 0; k < n; ++k) held[r][k] = 1u << r;
    }
    std::vector<int> summed_at(n, -1);
    for (int t = 0; t < 2 * (n - 1); ++t) {
      std::vector<std::vector<uint32_t>> next = held;
      for (int r = 0; r < n; ++r) {
        RingPlan plan(n, r, 100, 3);
        const int left = (r + n - 1) % n;
        const int k = plan.RecvSegment(t);
        ASSERT_EQ(RingPlan(n, left, 100, 3).SendSegment(t), k);
        const uint32_t incoming = held[left][k];
        if (plan.IsReduceStep(t)) {
          EXPECT_EQ(incoming & held[r][k], 0u) << "counted twice";
          next[r][k] = incoming | held[r][k];
          if (next[r][k] == all) summed_at[k] = r;
        } else {
          EXPECT_EQ(incoming, all);
          next[r][k] = incoming;
        }
      }
      held = next;
      if (t == n - 2) {
        for (int r = 0; r < n; ++r) EXPECT_EQ(held[r][(r + 1) % n], all);
      }
    }
    for (int r = 0; r < n; ++r) {
      for (int k = 0; k < n; ++k) EXPECT_EQ(held[r][k], all);
    }
    for (int k = 0; k < n; ++k) EXPECT_EQ(summed_at[k], (k + n - 1) % n);
  }
}

}  // namespace
}  // namespace lockstep
