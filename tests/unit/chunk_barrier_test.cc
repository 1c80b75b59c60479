#include "server/core/chunk_barrier.h"

#include <cmath>
#include <limits>
#include <optional>
#include <string>
#include <vector>

#include "gmock/gmock.h"
#include "gtest/gtest.h"
#include "tests/unit/chunk_reply_test_util.h"

namespace lockstep {
namespace {

using ::testing::ElementsAre;
using ::testing::HasSubstr;

// A 2-element chunk with plain SGD (lr 0.5), weights {10, 20}.
class ChunkBarrierTest : public ::testing::Test {
 protected:
  std::unique_ptr<ChunkBarrier> Make(SyncPolicy policy, int workers) {
    OptimizerConfig sgd = OptimizerConfig::Defaults("sgd");
    sgd.learning_rate = 0.5;
    auto barrier = std::make_unique<ChunkBarrier>(
        Chunk{0, 0, 2, 0}, policy, workers, sgd,
        &counters_);
    const std::vector<float> w0 = {10, 20};
    EXPECT_TRUE(barrier->Initialize(Bytes(w0)).ok());
    return barrier;
  }
  void Push(ChunkBarrier& b, int rank, int64_t step,
            const std::vector<float>& g, Reply* reply) {
    const absl::string_view bytes = Bytes(g);
    b.Push(rank, step, WireDType::kFloat32, {bytes}, absl::Now(),
           reply->Callback());
  }
  BarrierCounters counters_;
};

TEST_F(ChunkBarrierTest, BackupWorkersCloseTheStepAndDropTheStraggler) {
  SyncPolicy policy;
  policy.backup_workers = 1;
  auto b = Make(policy, 3);
  Reply r0, r2, late;
  Push(*b, 0, 0, {2, 4}, &r0);
  EXPECT_FALSE(r0.result.has_value());
  Push(*b, 2, 0, {6, 8}, &r2);
  ASSERT_TRUE(r0.result.has_value() && r0.result->ok());
  // Averaged over the two that came: w - 0.5 * (8, 12) / 2.
  EXPECT_THAT(r0.values(), ElementsAre(8.0f, 17.0f));
  EXPECT_EQ(r0.version(), 1);
  Push(*b, 1, 0, {100, 100}, &late);
  ASSERT_TRUE(late.result.has_value() && late.result->ok());
  EXPECT_EQ(late.version(), 1) << "the straggler catches up";
  EXPECT_THAT(late.values(), ElementsAre(8.0f, 17.0f)) << "and changes nothing";
  EXPECT_EQ(counters_.pushes_dropped_late.load(), 1);
  // A re-sent push of a rank that was counted is answered, not dropped.
  Reply again;
  Push(*b, 0, 0, {2, 4}, &again);
  EXPECT_EQ(again.version(), 1);
  EXPECT_EQ(counters_.pushes_dropped_late.load(), 1);
}

// The replies of one version share one encoding per narrow dtype while any
// of them holds it, made from that version's weights; the next version gets
// its own.
TEST_F(ChunkBarrierTest, RepliesOfAVersionShareItsEncoding) {
  auto b = Make(SyncPolicy{}, 2);
  Reply r0, r1, pulled;
  Push(*b, 0, 0, {2, 4}, &r0);
  Push(*b, 1, 0, {6, 8}, &r1);
  b->Pull(1, /*exact=*/false, pulled.Callback());
  ASSERT_TRUE(r0.result->ok() && r1.result->ok() && pulled.result->ok());
  const ChunkSnapshot& s0 = **r0.result;
  const ChunkSnapshot& s1 = **r1.result;
  ASSERT_NE(s0.encoded, nullptr);
  EXPECT_EQ(s0.encoded, s1.encoded);
  EXPECT_EQ((*pulled.result)->encoded, s0.encoded);
  for (const WireDType dtype : {WireDType::kBfloat16, WireDType::kFloat16}) {
    const std::shared_ptr<const std::string> once =
        s0.encoded->Get(dtype, *s0.values);
    EXPECT_EQ(s1.encoded->Get(dtype, *s1.values), once) << "encoded twice";
    std::string expected;
    EncodeTensor(*s0.values, dtype, &expected);
    EXPECT_EQ(*once, expected);
  }
  EXPECT_NE(*s0.encoded->Get(WireDType::kBfloat16, *s0.values),
            *s0.encoded->Get(WireDType::kFloat16, *s0.values));

  Reply next0, next1;
  Push(*b, 0, 1, {2, 4}, &next0);
  Push(*b, 1, 1, {6, 8}, &next1);
  ASSERT_TRUE(next0.result->ok());
  const ChunkSnapshot& s2 = **next0.result;
  EXPECT_NE(s2.encoded, s0.encoded);
  std::string expected;
  EncodeTensor(*s2.values, WireDType::kBfloat16, &expected);
  EXPECT_EQ(*s2.encoded->Get(WireDType::kBfloat16, *s2.values), expected);
  EXPECT_NE(expected, *s0.encoded->Get(WireDType::kBfloat16, *s0.values));
}

// A step given up on leaves nothing behind: the pushes of its retry are
// all the next sum holds.
TEST_F(ChunkBarrierTest, AnExpiredStepLeavesNothingInTheNextSum) {
  auto b = Make(SyncPolicy{}, 2);
  Reply lost;
  Push(*b, 0, 0, {100, 100}, &lost);
  ASSERT_TRUE(b->Expire(0, absl::DeadlineExceededError("step 0 expired")));
  ASSERT_TRUE(lost.result.has_value());
  EXPECT_EQ(lost.result->status().code(), absl::StatusCode::kDeadlineExceeded);
  Reply r0, r1;
  Push(*b, 1, 0, {6, 8}, &r0);
  Push(*b, 0, 0, {2, 4}, &r1);
  ASSERT_TRUE(r0.result.has_value() && r0.result->ok());
  // w - 0.5 * (8, 12) / 2, as if the expired push had never come.
  EXPECT_THAT(r0.values(), ElementsAre(8.0f, 17.0f));
  // And the step after sums its own pushes only.
  Reply s0, s1;
  Push(*b, 0, 1, {4, -4}, &s0);
  Push(*b, 1, 1, {0, 0}, &s1);
  ASSERT_TRUE(s0.result.has_value() && s0.result->ok());
  EXPECT_THAT(s0.values(), ElementsAre(7.0f, 18.0f));
}

TEST_F(ChunkBarrierTest, SyncWithoutBackupsRefusesWrongSteps) {
  auto b = Make(SyncPolicy(), 2);
  Reply ahead, behind;
  Push(*b, 0, 1, {1, 1}, &ahead);
  EXPECT_EQ(ahead.result->status().code(),
            absl::StatusCode::kFailedPrecondition);
  Reply r0, r1;
  Push(*b, 0, 0, {1, 1}, &r0);
  Push(*b, 1, 0, {1, 1}, &r1);
  Reply r0b, r1b;
  Push(*b, 0, 1, {1, 1}, &r0b);
  Push(*b, 1, 1, {1, 1}, &r1b);
  Push(*b, 0, 0, {1, 1}, &behind);  // Two steps old.
  EXPECT_EQ(behind.result->status().code(),
            absl::StatusCode::kFailedPrecondition);
  EXPECT_EQ(counters_.pushes_refused.load(), 2);
}

// Every refusal of the barrier's checks (push_checks.h) answers the push
// and is counted once, by its code; nothing is summed.
TEST_F(ChunkBarrierTest, EveryRefusalIsCountedOnceByItsCode) {
  auto b = Make(SyncPolicy(), 2);
  OptimizerConfig sgd = OptimizerConfig::Defaults("sgd");
  ChunkBarrier empty(Chunk{0, 0, 2, 0}, SyncPolicy(), 2,
                     sgd, &counters_);
  Reply negative, nan, ahead, uninitialized, closed;
  Push(*b, 0, -1, {1, 1}, &negative);
  Push(*b, 0, 0, {1, std::nanf("")}, &nan);
  Push(*b, 0, 1, {1, 1}, &ahead);
  Push(empty, 0, 0, {1, 1}, &uninitialized);
  b->Close(absl::UnavailableError("closed"));
  Push(*b, 1, 0, {1, 1}, &closed);
  const auto expect = [](const Reply& r, absl::StatusCode code,
                         const std::string& words) {
    ASSERT_TRUE(r.result.has_value()) << words;
    EXPECT_EQ(r.result->status().code(), code) << words;
    EXPECT_THAT(std::string(r.result->status().message()), HasSubstr(words));
  };
  expect(negative, absl::StatusCode::kInvalidArgument, "negative step -1");
  expect(nan, absl::StatusCode::kInvalidArgument, "chunk 0: ");
  expect(ahead, absl::StatusCode::kFailedPrecondition, "expected step 0");
  expect(uninitialized, absl::StatusCode::kFailedPrecondition,
         "has no weights yet");
  expect(closed, absl::StatusCode::kUnavailable, "closed");
  EXPECT_EQ(counters_.pushes_refused.load(), 5);
  const auto by_code = [&](absl::StatusCode code) {
    return counters_.pushes_refused_by_code[static_cast<int>(code)].load();
  };
  EXPECT_EQ(by_code(absl::StatusCode::kInvalidArgument), 2);
  EXPECT_EQ(by_code(absl::StatusCode::kFailedPrecondition), 2);
  EXPECT_EQ(by_code(absl::StatusCode::kUnavailable), 1);
  EXPECT_EQ(counters_.pushes_accepted.load(), 0);
}

// A replaced configuration's barriers give their memory back; a caller
// still holding one is answered with the close status, as before.
TEST_F(ChunkBarrierTest, AReleasedBarrierAnswersWithItsCloseStatus) {
  auto b = Make(SyncPolicy(), 2);
  Reply waiting;
  Push(*b, 0, 0, {1, 1}, &waiting);
  b->ReleaseMemory();  // Open: nothing happens.
  Reply other;
  Push(*b, 1, 0, {1, 1}, &other);
  ASSERT_TRUE(other.result.has_value() && other.result->ok());
  EXPECT_THAT(*(*other.result)->values, ElementsAre(9.5f, 19.5f));
  b->Close(absl::FailedPreconditionError("replaced by rank 0's model"));
  b->ReleaseMemory();
  Reply push, pull;
  Push(*b, 0, 1, {1, 1}, &push);
  b->Pull(0, false, pull.Callback());
  for (Reply* r : {&push, &pull}) {
    ASSERT_TRUE(r->result.has_value());
    EXPECT_EQ(r->result->status().code(), absl::StatusCode::kFailedPrecondition);
    EXPECT_THAT(std::string(r->result->status().message()),
                HasSubstr("replaced by rank 0's model"));
  }
  EXPECT_EQ(b->Initialize(Bytes(std::vector<float>{1, 2})).code(),
            absl::StatusCode::kFailedPrecondition);
}

TEST_F(ChunkBarrierTest, AsyncAppliesEveryPushOnItsOwn) {
  SyncPolicy policy;
  policy.mode = SyncMode::kAsync;
  auto b = Make(policy, 2);
  Reply r0, r1;
  Push(*b, 0, 0, {2, 4}, &r0);
  ASSERT_TRUE(r0.result.has_value());
  EXPECT_THAT(r0.values(), ElementsAre(9.0f, 18.0f));
  EXPECT_EQ(r0.version(), 1);
  Push(*b, 1, 0, {6, 8}, &r1);  // Stale (computed on version 0): applied.
  EXPECT_THAT(r1.values(), ElementsAre(6.0f, 14.0f));
  EXPECT_EQ(r1.version(), 2);
  EXPECT_EQ(counters_.chunk_steps.load(), 2);
}

// A push re-sent after its answer was lost (or held past the worker's
// deadline, in SSP) comes back for the rank's last step with a new
// registration: it is answered, and not applied a second time.
TEST_F(ChunkBarrierTest, AsyncAndSspApplyAReSentPushOnce) {
  for (const SyncMode mode :
       {SyncMode::kAsync, SyncMode::kSsp}) {
    SCOPED_TRACE(SyncModeName(mode));
    SyncPolicy policy;
    policy.mode = mode;
    policy.staleness = 1;
    auto b = Make(policy, 2);
    Reply first, again, next;
    Push(*b, 0, 0, {2, 4}, &first);
    ASSERT_TRUE(first.result.has_value() && first.result->ok());
    EXPECT_THAT(first.values(), ElementsAre(9.0f, 18.0f));
    Push(*b, 0, 0, {2, 4}, &again);
    ASSERT_TRUE(again.result.has_value() && again.result->ok());
    EXPECT_EQ(again.version(), 1) << "applied twice";
    EXPECT_THAT(again.values(), ElementsAre(9.0f, 18.0f));
    Push(*b, 1, 0, {2, 4}, &next);  // Another rank's step 0 counts.
    ASSERT_TRUE(next.result.has_value() && next.result->ok());
    EXPECT_EQ(next.version(), 2);
    EXPECT_THAT(next.values(), ElementsAre(8.0f, 16.0f));
  }
}

TEST_F(ChunkBarrierTest, SspHoldsTheFastestWithinStaleness) {
  SyncPolicy policy;
  policy.mode = SyncMode::kSsp;
  policy.staleness = 1;
  auto b = Make(policy, 2);
  Reply s0, s1, s2;
  Push(*b, 0, 0, {1, 1}, &s0);
  EXPECT_TRUE(s0.result.has_value()) << "one step ahead is allowed";
  Push(*b, 0, 1, {1, 1}, &s1);
  EXPECT_FALSE(s1.result.has_value()) << "two steps ahead must wait";
  EXPECT_TRUE(b->HasPushed(0));
  Reply slow;
  Push(*b, 1, 0, {1, 1}, &slow);
  ASSERT_TRUE(s1.result.has_value());
  EXPECT_EQ(s1.version(), 3) << "every push was applied";
  EXPECT_THAT(s1.values(), ElementsAre(8.5f, 18.5f));
  ASSERT_TRUE(slow.result.has_value());
  policy.staleness = 0;
  auto strict = Make(policy, 2);
  Push(*strict, 0, 0, {1, 1}, &s2);
  EXPECT_FALSE(s2.result.has_value()) << "staleness 0 waits for everyone";
}

// SSP eviction: an evicted rank is left out of the slowest, so the pushes
// held for it are answered; back and behind, it holds nobody until its
// clock has caught up with the others', and is waited for again then.
TEST_F(ChunkBarrierTest, SspExcusesAnEvictedRankUntilItCatchesUp) {
  SyncPolicy policy;
  policy.mode = SyncMode::kSsp;
  policy.staleness = 1;
  auto b = Make(policy, 2);
  Reply s0, s1;
  Push(*b, 0, 0, {1, 1}, &s0);
  Push(*b, 0, 1, {1, 1}, &s1);
  ASSERT_TRUE(s0.result.has_value());
  ASSERT_FALSE(s1.result.has_value()) << "held for rank 1's step 0";
  EXPECT_FALSE(b->Excuse({0})) << "rank 0 is not the slowest";
  ASSERT_TRUE(b->Excuse({1}));
  ASSERT_TRUE(s1.result.has_value() && s1.result->ok());
  EXPECT_EQ(s1.version(), 2);
  EXPECT_FALSE(b->Pending().has_value()) << "nothing waits any more";
  // Rank 0 alone sets the pace while rank 1 is away or behind.
  for (int64_t step : {2, 3, 4}) {
    Reply r;
    Push(*b, 0, step, {1, 1}, &r);
    ASSERT_TRUE(r.result.has_value() && r.result->ok()) << step;
  }
  // Rank 1 comes back at its own step 0 and catches up, held by no one
  // and holding no one, up to rank 0's clock (9).
  for (int64_t step = 0; step < 9; ++step) {
    Reply r, ahead;
    Push(*b, 1, step, {1, 1}, &r);
    ASSERT_TRUE(r.result.has_value() && r.result->ok()) << step;
    if (step >= 4) continue;
    Push(*b, 0, 5 + step, {1, 1}, &ahead);
    ASSERT_TRUE(ahead.result.has_value() && ahead.result->ok()) << step;
  }
  EXPECT_EQ(b->version(), 18) << "every push was applied once";
  Reply held, held2, next;
  Push(*b, 0, 9, {1, 1}, &held);
  ASSERT_TRUE(held.result.has_value()) << "one step ahead is allowed";
  Push(*b, 0, 10, {1, 1}, &held2);
  EXPECT_FALSE(held2.result.has_value()) << "rank 1 is waited for again";
  ASSERT_TRUE(b->Pending().has_value());
  EXPECT_THAT(b->Pending()->missing, ElementsAre(1));
  Push(*b, 1, 9, {1, 1}, &next);
  EXPECT_TRUE(held2.result.has_value() && held2.result->ok());
  // Sync mode has no clock to leave a rank out of.
  EXPECT_FALSE(Make(SyncPolicy{}, 2)->Excuse({1}));
}

// Rank 0 may send version 0 again: it lost an answer, or died and its
// replacement (same seed) starts over while some chunks are stored. The
// same bytes at version 0 are accepted; other bytes, or after a step, not.
TEST_F(ChunkBarrierTest, ReSentInitializationOfTheSameWeightsIsAccepted) {
  auto b = Make(SyncPolicy{}, 2);  // Initialized with {10, 20}.
  EXPECT_TRUE(b->Initialize(Bytes({10, 20})).ok());
  const absl::Status other = b->Initialize(Bytes({10, 21}));
  EXPECT_EQ(other.code(), absl::StatusCode::kFailedPrecondition);
  EXPECT_THAT(std::string(other.message()), HasSubstr("with other weights"));
  Reply r0, r1;
  Push(*b, 0, 0, {2, 4}, &r0);
  Push(*b, 1, 0, {6, 8}, &r1);
  ASSERT_TRUE(r0.result.has_value() && r0.result->ok());
  EXPECT_EQ(b->Initialize(Bytes({10, 20})).code(),
            absl::StatusCode::kFailedPrecondition)
      << "version 1 must not be replaced by version 0";
  EXPECT_THAT(r0.values(), ElementsAre(8.0f, 17.0f));
}

// A pull waits for the next version at most; a far one is refused at once
// rather than parked (with its memory) until the server stops.
TEST_F(ChunkBarrierTest, APullOfAFarVersionIsRefusedNotParked) {
  auto b = Make(SyncPolicy{}, 2);  // Version 0.
  Reply next, far;
  b->Pull(1, /*exact=*/false, next.Callback());
  EXPECT_FALSE(next.result.has_value()) << "version 1 is waited for";
  b->Pull(int64_t{1} << 62, /*exact=*/false, far.Callback());
  ASSERT_TRUE(far.result.has_value());
  EXPECT_EQ(far.result->status().code(), absl::StatusCode::kOutOfRange);
  Reply r0, r1;
  Push(*b, 0, 0, {2, 4}, &r0);
  Push(*b, 1, 0, {6, 8}, &r1);
  ASSERT_TRUE(next.result.has_value() && next.result->ok());
  EXPECT_EQ(next.version(), 1);
}

// Exact pulls of the version before share one copy of it (a caller must
// not make the server copy a chunk per call), which goes once the next
// step's first push writes the accumulator. A version off the wire as
// large as int64 allows is refused, not overflowed.
TEST_F(ChunkBarrierTest, ExactPullsShareOneCopyOfThePreviousVersion) {
  auto b = Make(SyncPolicy{}, 2);
  Reply r0, r1;
  Push(*b, 0, 0, {2, 4}, &r0);
  Push(*b, 1, 0, {6, 8}, &r1);
  ASSERT_TRUE(r0.result->ok());
  Reply first, second;
  b->Pull(0, /*exact=*/true, first.Callback());
  b->Pull(0, /*exact=*/true, second.Callback());
  ASSERT_TRUE(first.result->ok() && second.result->ok());
  EXPECT_EQ(first.version(), 0);
  EXPECT_THAT(first.values(), ElementsAre(10.0f, 20.0f));
  EXPECT_EQ((*first.result)->values, (*second.result)->values);
  EXPECT_EQ((*first.result)->encoded, (*second.result)->encoded);
  Reply next0;
  Push(*b, 0, 1, {2, 4}, &next0);  // Writes the accumulator.
  Reply late;
  b->Pull(0, /*exact=*/true, late.Callback());
  ASSERT_TRUE(late.result->ok());
  EXPECT_EQ(late.version(), 1) << "version 0 is gone: the latest instead";
  EXPECT_THAT(first.values(), ElementsAre(10.0f, 20.0f)) << "still held";
  Reply huge;
  b->Pull(std::numeric_limits<int64_t>::max(), /*exact=*/true, huge.Callback());
  ASSERT_TRUE(huge.result.has_value());
  EXPECT_EQ(huge.result->status().code(), absl::StatusCode::kOutOfRange);
}

TEST_F(ChunkBarrierTest, CloseAnswersEveryWaiter) {
  auto b = Make(SyncPolicy(), 2);
  Reply waiting, pull;
  Push(*b, 0, 0, {1, 1}, &waiting);
  b->Pull(1, /*exact=*/false, pull.Callback());
  EXPECT_FALSE(pull.result.has_value());
  b->Close(absl::UnavailableError("bye"));
  EXPECT_EQ(waiting.result->status().code(), absl::StatusCode::kUnavailable);
  EXPECT_EQ(pull.result->status().code(), absl::StatusCode::kUnavailable);
  Reply after;
  Push(*b, 1, 0, {1, 1}, &after);
  EXPECT_EQ(after.result->status().code(), absl::StatusCode::kUnavailable);
}

}  // namespace
}  // namespace lockstep
