#include "worker/data/sharded_sampler.h"

#include <algorithm>
#include <cstdint>
#include <numeric>
#include <set>
#include <utility>
#include <vector>

#include "absl/status/status.h"
#include "gmock/gmock.h"
#include "gtest/gtest.h"

namespace lockstep {
namespace {

using ::testing::ElementsAreArray;
using ::testing::SizeIs;

ShardedSampler MakeSampler(int64_t n, int workers, int rank, int batch,
                           uint64_t seed) {
  absl::StatusOr<ShardedSampler> sampler =
      ShardedSampler::Create(n, workers, rank, batch, seed);
  EXPECT_TRUE(sampler.ok()) << sampler.status();
  return *std::move(sampler);
}

std::vector<int64_t> Iota(int64_t n) {
  std::vector<int64_t> out(n);
  std::iota(out.begin(), out.end(), int64_t{0});
  return out;
}

TEST(ShardedSamplerTest, RejectsInvalidArguments) {
  struct Case {
    int64_t n;
    int workers, rank, batch;
  };
  for (const Case& c : std::vector<Case>{{100, 0, 0, 1},
                                         {100, 2, -1, 1},
                                         {100, 2, 2, 1},
                                         {100, 2, 0, 0},
                                         {100, 2, 0, -3},
                                         {19, 4, 0, 5},
                                         {0, 1, 0, 1}}) {
    absl::StatusOr<ShardedSampler> sampler =
        ShardedSampler::Create(c.n, c.workers, c.rank, c.batch, 1);
    EXPECT_EQ(sampler.status().code(), absl::StatusCode::kInvalidArgument)
        << c.n << " " << c.workers << " " << c.rank << " " << c.batch;
  }
  EXPECT_TRUE(ShardedSampler::Create(20, 4, 3, 5, 1).ok());
}

TEST(ShardedSamplerTest, StepsPerEpochDropsTheRemainder) {
  EXPECT_EQ(MakeSampler(20, 4, 0, 5, 1).StepsPerEpoch(), 1);
  EXPECT_EQ(MakeSampler(39, 4, 0, 5, 1).StepsPerEpoch(), 1);
  EXPECT_EQ(MakeSampler(40, 4, 0, 5, 1).StepsPerEpoch(), 2);
  EXPECT_EQ(MakeSampler(103, 4, 2, 5, 1).StepsPerEpoch(), 5);
  EXPECT_EQ(MakeSampler(60000, 1, 0, 64, 1).StepsPerEpoch(), 937);
}

TEST(ShardedSamplerTest, EachEpochIsAPermutationAndEpochsDiffer) {
  const ShardedSampler sampler = MakeSampler(1000, 2, 0, 10, 9);
  std::set<std::vector<int64_t>> distinct;
  for (int64_t epoch = 0; epoch < 5; ++epoch) {
    std::vector<int64_t> perm = sampler.EpochPermutation(epoch);
    distinct.insert(perm);
    EXPECT_NE(perm, Iota(1000)) << "epoch " << epoch << " is not shuffled";
    std::sort(perm.begin(), perm.end());
    EXPECT_EQ(perm, Iota(1000)) << "epoch " << epoch;
  }
  EXPECT_EQ(distinct.size(), 5u);
}

TEST(ShardedSamplerTest, SameSeedSameOrderOtherSeedOtherOrder) {
  // The order must not depend on the worker count or rank either.
  const ShardedSampler a = MakeSampler(500, 1, 0, 1, 123);
  const ShardedSampler b = MakeSampler(500, 5, 3, 7, 123);
  const ShardedSampler c = MakeSampler(500, 1, 0, 1, 124);
  for (int64_t epoch : {0, 1, 17}) {
    EXPECT_EQ(a.EpochPermutation(epoch), b.EpochPermutation(epoch));
    EXPECT_NE(a.EpochPermutation(epoch), c.EpochPermutation(epoch));
  }
}

TEST(ShardedSamplerTest, SmallestSetIsTheIdentity) {
  EXPECT_THAT(MakeSampler(1, 1, 0, 1, 5).EpochPermutation(3),
              ElementsAreArray({0}));
}

TEST(ShardedSamplerTest, BatchesAreSlicesOfTheEpochPermutation) {
  constexpr int kWorkers = 3, kBatch = 4;
  ShardedSampler sampler = MakeSampler(50, kWorkers, 1, kBatch, 77);
  const int64_t spe = sampler.StepsPerEpoch();
  ASSERT_EQ(spe, 4);
  for (int64_t step = 0; step < 3 * spe; ++step) {
    const std::vector<int64_t> perm = sampler.EpochPermutation(step / spe);
    const int64_t start = (step % spe) * kWorkers * kBatch + 1 * kBatch;
    EXPECT_THAT(
        sampler.BatchIndices(step),
        ElementsAreArray(perm.begin() + start, perm.begin() + start + kBatch))
        << "step " << step;
  }
}

TEST(ShardedSamplerTest, RanksAreDisjointAndMatchTheSingleWorkerBatch) {
  constexpr int64_t kExamples = 103;
  constexpr int kWorkers = 4, kBatch = 5;
  constexpr uint64_t kSeed = 2024;
  std::vector<ShardedSampler> ranks;
  for (int r = 0; r < kWorkers; ++r) {
    ranks.push_back(MakeSampler(kExamples, kWorkers, r, kBatch, kSeed));
  }
  ShardedSampler single =
      MakeSampler(kExamples, 1, 0, kWorkers * kBatch, kSeed);
  ASSERT_EQ(single.StepsPerEpoch(), ranks[0].StepsPerEpoch());
  const int64_t spe = single.StepsPerEpoch();

  for (int64_t epoch = 0; epoch < 3; ++epoch) {
    std::set<int64_t> seen_in_epoch;
    for (int64_t s = 0; s < spe; ++s) {
      const int64_t step = epoch * spe + s;
      std::vector<int64_t> concatenated;
      std::set<int64_t> seen_in_step;
      for (ShardedSampler& rank : ranks) {
        const std::vector<int64_t> batch = rank.BatchIndices(step);
        ASSERT_THAT(batch, SizeIs(kBatch));
        for (int64_t i : batch) {
          EXPECT_GE(i, 0);
          EXPECT_LT(i, kExamples);
          EXPECT_TRUE(seen_in_step.insert(i).second)
              << "index " << i << " on two ranks at step " << step;
          EXPECT_TRUE(seen_in_epoch.insert(i).second)
              << "index " << i << " twice in epoch " << epoch;
        }
        concatenated.insert(concatenated.end(), batch.begin(), batch.end());
      }
      // Not just the same set: rank order tiles the big batch exactly.
      EXPECT_EQ(concatenated, single.BatchIndices(step)) << "step " << step;
    }
    EXPECT_EQ(seen_in_epoch.size(),
              static_cast<size_t>(spe * kWorkers * kBatch));
  }
}

TEST(ShardedSamplerTest, RandomAccessMatchesSequentialAccess) {
  ShardedSampler sequential = MakeSampler(64, 2, 1, 8, 5);
  std::vector<std::vector<int64_t>> expected;
  for (int64_t step = 0; step < 20; ++step) {
    expected.push_back(sequential.BatchIndices(step));
  }
  // A fresh sampler, visited out of order, crossing the cached epoch back
  // and forth.
  ShardedSampler shuffled = MakeSampler(64, 2, 1, 8, 5);
  for (int64_t step : {19, 0, 7, 4, 3, 12, 0, 19, 8}) {
    EXPECT_EQ(shuffled.BatchIndices(step), expected[step]) << "step " << step;
  }
  // Consecutive epochs give different batches at the same position.
  EXPECT_NE(expected[0], expected[4]);
}

}  // namespace
}  // namespace lockstep
