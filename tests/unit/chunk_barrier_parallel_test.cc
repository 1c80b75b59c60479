// A chunk barrier whose sums and optimizer steps are split over a pool of
// threads, and a model cut into smaller chunks, give the bits of one
// thread and one chunk: for every sync mode, wire dtype and optimizer, over
// several steps. A NaN in a push leaves the sum of the others untouched.
#include <cmath>
#include <cstdint>
#include <memory>
#include <random>
#include <string>
#include <tuple>
#include <vector>

#include "absl/base/casts.h"
#include "gmock/gmock.h"
#include "gtest/gtest.h"
#include "server/core/chunk_barrier.h"
#include "tests/unit/chunk_reply_test_util.h"

namespace lockstep {
namespace {

using ::testing::HasSubstr;

// Four blocks of the pool's grain and a ragged tail.
constexpr int64_t kElements = 4 * ChunkBarrier::kParallelGrain + 1234;
constexpr int kWorkers = 3;
constexpr int kSteps = 3;

std::vector<float> Gradient(int rank, int step) {
  std::mt19937 rng(static_cast<uint32_t>(100 * step + rank));
  std::normal_distribution<float> normal(0.0f, 1.0f);
  std::vector<float> g(kElements);
  for (float& x : g) x = normal(rng);
  return g;
}

// The gradient as `dtype` puts it on the wire, cut into pieces at odd
// places (an element straddles two of them), as gRPC's slices may be.
struct Payload {
  std::string bytes;
  std::vector<absl::string_view> pieces;
};
Payload Encode(const std::vector<float>& values, WireDType dtype, int64_t begin,
               int64_t end) {
  Payload p;
  EncodeTensor(absl::MakeConstSpan(values).subspan(begin, end - begin), dtype,
               &p.bytes);
  const absl::string_view all = p.bytes;
  for (size_t at = 0; at < all.size();) {
    const size_t n = std::min<size_t>(all.size() - at, 40001);
    p.pieces.push_back(all.substr(at, n));
    at += n;
  }
  return p;
}

struct TrainedRun {
  std::vector<float> weights;  // After every step.
  std::vector<int64_t> versions;
};

// Trains `chunks` barriers that together cover kElements, each with
// `pool`, for kSteps steps of kWorkers pushes; returns the last weights.
TrainedRun Train(SyncMode mode, WireDType dtype,
                 const std::string& optimizer, WorkPool* pool, int chunks,
                 SumOrder order = SumOrder::kArrival) {
  SyncPolicy policy;
  policy.mode = mode;
  policy.staleness = 1;
  OptimizerConfig config = OptimizerConfig::Defaults(optimizer);
  config.learning_rate = 0.01;
  if (optimizer == "adamw") config.weight_decay = 0.004;
  BarrierCounters counters;
  std::vector<std::unique_ptr<ChunkBarrier>> barriers;
  std::vector<int64_t> offsets;
  std::vector<float> w0(kElements);
  for (int64_t i = 0; i < kElements; ++i) {
    w0[i] = std::sin(static_cast<float>(i));
  }
  for (int c = 0; c < chunks; ++c) {
    const int64_t begin = kElements * c / chunks;
    const int64_t end = kElements * (c + 1) / chunks;
    offsets.push_back(begin);
    auto b = std::make_unique<ChunkBarrier>(
        Chunk{c, begin, end - begin, 0}, policy, kWorkers,
        config, &counters, nullptr, order,
        pool);
    std::vector<float> part(w0.begin() + begin, w0.begin() + end);
    EXPECT_TRUE(b->Initialize(Bytes(part)).ok());
    barriers.push_back(std::move(b));
  }
  offsets.push_back(kElements);
  TrainedRun run;
  for (int step = 0; step < kSteps; ++step) {
    // Ranks push in reverse order: the rank-order sum holds the early ones.
    for (int rank = kWorkers - 1; rank >= 0; --rank) {
      const std::vector<float> g = Gradient(rank, step);
      for (int c = 0; c < chunks; ++c) {
        Payload p = Encode(g, dtype, offsets[c], offsets[c + 1]);
        Reply reply;
        barriers[c]->Push(rank, step, dtype, p.pieces, absl::Now(),
                          reply.Callback());
        if (reply.result.has_value()) {
          EXPECT_TRUE(reply.ok()) << reply.result->status();
        }
      }
    }
  }
  run.weights.resize(kElements);
  for (int c = 0; c < chunks; ++c) {
    std::optional<ChunkState> state = barriers[c]->Export();
    EXPECT_TRUE(state.has_value());
    if (!state.has_value()) return run;
    std::copy(state->weights.begin(), state->weights.end(),
              run.weights.begin() + offsets[c]);
    run.versions.push_back(state->version);
  }
  return run;
}

void ExpectSameBits(const TrainedRun& want, const TrainedRun& got) {
  ASSERT_EQ(want.weights.size(), static_cast<size_t>(kElements));
  ASSERT_EQ(got.weights.size(), want.weights.size());
  EXPECT_EQ(got.versions.front(), want.versions.front());
  int64_t differ = 0, first = -1;
  for (size_t i = 0; i < want.weights.size(); ++i) {
    if (absl::bit_cast<uint32_t>(want.weights[i]) !=
        absl::bit_cast<uint32_t>(got.weights[i])) {
      if (first < 0) first = static_cast<int64_t>(i);
      ++differ;
    }
  }
  EXPECT_EQ(differ, 0) << "first at " << first;
}

using Case = std::tuple<SyncMode, WireDType, std::string>;

class ParallelBarrierTest : public ::testing::TestWithParam<Case> {};

TEST_P(ParallelBarrierTest, PoolAndSmallerChunksGiveTheSameBits) {
  const auto& [mode, dtype, optimizer] = GetParam();
  const TrainedRun whole = Train(mode, dtype, optimizer, nullptr, 1);
  // The weights moved: a run that changed nothing would match trivially.
  ASSERT_EQ(whole.versions.front(),
            mode == SyncMode::kSync ? kSteps : kSteps * kWorkers);
  WorkPool pool(3);
  ExpectSameBits(whole, Train(mode, dtype, optimizer, &pool, 1));
  ExpectSameBits(whole, Train(mode, dtype, optimizer, nullptr, 7));
  ExpectSameBits(whole, Train(mode, dtype, optimizer, &pool, 3));
  if (mode == SyncMode::kSync) {
    ExpectSameBits(Train(mode, dtype, optimizer, nullptr, 1, SumOrder::kRank),
                   Train(mode, dtype, optimizer, &pool, 3, SumOrder::kRank));
  }
}

INSTANTIATE_TEST_SUITE_P(
    EveryModeDtypeAndOptimizer, ParallelBarrierTest,
    ::testing::Combine(::testing::Values(SyncMode::kSync,
                                         SyncMode::kAsync,
                                         SyncMode::kSsp),
                       ::testing::Values(WireDType::kFloat32,
                                         WireDType::kBfloat16,
                                         WireDType::kFloat16),
                       ::testing::Values("sgd", "momentum", "adamw")));

// A push with a NaN late in its payload (in the pool's last block) is
// refused, and the step then closes with exactly the other pushes' sum.
TEST(ParallelBarrierCheckTest, ARefusedPushLeavesTheSumAsItWas) {
  WorkPool pool(3);
  auto run = [&](bool with_bad_push) {
    SyncPolicy policy;
    OptimizerConfig sgd = OptimizerConfig::Defaults("sgd");
    BarrierCounters counters;
    ChunkBarrier b(Chunk{0, 0, kElements, 0}, policy, 2,
                   sgd, &counters, nullptr,
                   SumOrder::kArrival, &pool);
    const std::vector<float> w0(kElements, 1.0f);
    EXPECT_TRUE(b.Initialize(Bytes(w0)).ok());
    Reply r0, r1, bad;
    const std::vector<float> g0 = Gradient(0, 0);
    b.Push(0, 0, WireDType::kFloat32, {Bytes(g0)}, absl::Now(), r0.Callback());
    if (with_bad_push) {
      std::vector<float> g = Gradient(1, 1);
      g[kElements - 3] = std::nanf("");
      b.Push(1, 0, WireDType::kFloat32, {Bytes(g)}, absl::Now(),
             bad.Callback());
      EXPECT_TRUE(bad.result.has_value());
      EXPECT_EQ(bad.result->status().code(),
                absl::StatusCode::kInvalidArgument);
      EXPECT_THAT(std::string(bad.result->status().message()),
                  HasSubstr(absl::StrCat("element ", kElements - 3)));
      EXPECT_EQ(counters.pushes_refused.load(), 1);
    }
    const std::vector<float> g1 = Gradient(1, 0);
    b.Push(1, 0, WireDType::kFloat32, {Bytes(g1)}, absl::Now(), r1.Callback());
    EXPECT_TRUE(r1.ok());
    return r1.ok() ? r1.values() : std::vector<float>();
  };
  const std::vector<float> clean = run(false);
  const std::vector<float> after_bad = run(true);
  ASSERT_EQ(clean.size(), static_cast<size_t>(kElements));
  ASSERT_EQ(after_bad.size(), clean.size());
  for (int64_t i = 0; i < kElements; ++i) {
    ASSERT_EQ(absl::bit_cast<uint32_t>(clean[i]),
              absl::bit_cast<uint32_t>(after_bad[i]))
        << "element " << i;
  }
}

}  // namespace
}  // namespace lockstep
