// RingOp, one rank's bookkeeping of a ring all-reduce, driven by hand.
#include "worker/exchange/allreduce/ring_op.h"

#include <string>
#include <vector>

#include "absl/time/time.h"
#include "common/wire/wire_codec.h"
#include "gtest/gtest.h"

namespace lockstep {
namespace {

// A chunk as `sender` would send it for `send`, with its payload in `bytes`.
RingChunkView ChunkFrom(const RingOp& sender, RingOp::SendId send,
                        uint64_t session, std::string* bytes) {
  RingChunkView view;
  static_cast<RingChunkHeader&>(view) = sender.HeaderOf(send, session);
  EncodeFloat32(sender.ValuesOf(send), bytes);
  view.data = *bytes;
  return view;
}

TEST(RingOpTest, StepZeroIsReadyInOrderAndTheWindowBoundsIt) {
  // Segments of 8, 8 and 7 floats in chunks of 4: rank 1 sends segment 1
  // first, as chunks [8, 12) and [12, 16).
  std::vector<float> data(23);
  for (size_t i = 0; i < data.size(); ++i) data[i] = static_cast<float>(i);
  RingOp op(5, absl::MakeSpan(data), RingPlan(3, 1, 23, 4),
            absl::InfiniteFuture());
  EXPECT_FALSE(op.Finished());
  std::vector<RingOp::SendId> sends = op.TakeReady(1);
  ASSERT_EQ(sends.size(), 1u);
  EXPECT_EQ(sends[0].step, 0);
  EXPECT_EQ(sends[0].chunk, 0);
  EXPECT_TRUE(op.TakeReady(1).empty());  // The window is full.
  op.SendDone(true);
  sends = op.TakeReady(4);
  ASSERT_EQ(sends.size(), 1u);
  EXPECT_EQ(sends[0].chunk, 1);
  const RingChunkHeader header = op.HeaderOf(sends[0], 77);
  EXPECT_EQ(header.sender_rank, 1);
  EXPECT_EQ(header.session, 77u);
  EXPECT_EQ(header.op, 5);
  EXPECT_EQ(header.step, 0);
  EXPECT_EQ(header.chunk, 1);
  EXPECT_EQ(header.total_elements, 23);
  const absl::Span<const float> values = op.ValuesOf(sends[0]);
  EXPECT_EQ(std::vector<float>(values.begin(), values.end()),
            (std::vector<float>{12, 13, 14, 15}));
}

TEST(RingOpTest, ReduceStepsAddAndGatherStepsCopy) {
  // Two ranks, segments [0, 2) and [2, 4) in one chunk each. Rank 0
  // receives segment 1 at step 0 (added) and segment 0 at step 1 (copied).
  std::vector<float> data = {1, 2, 3, 4};
  RingOp op(0, absl::MakeSpan(data), RingPlan(2, 0, 4, 2),
            absl::InfiniteFuture());
  std::vector<float> left_data = {0, 0, 10, 20};
  RingOp left(0, absl::MakeSpan(left_data), RingPlan(2, 1, 4, 2),
              absl::InfiniteFuture());
  std::string bytes;
  RingChunkView chunk = ChunkFrom(left, RingOp::SendId{0, 0}, 9, &bytes);
  ASSERT_TRUE(op.Accept(chunk, 1, 9).ok());
  op.Apply(chunk);
  op.Applied(chunk);
  EXPECT_EQ(data, (std::vector<float>{1, 2, 13, 24}));
  // Step 0's own chunk and, made ready by the one applied, step 1's.
  std::vector<RingOp::SendId> sends = op.TakeReady(4);
  ASSERT_EQ(sends.size(), 2u);
  EXPECT_EQ(sends[1].step, 1);
  EXPECT_EQ(sends[1].chunk, 0);
  const absl::Span<const float> forwarded = op.ValuesOf(sends[1]);
  EXPECT_EQ(std::vector<float>(forwarded.begin(), forwarded.end()),
            (std::vector<float>{13, 24}));

  left_data = {7, 8, 0, 0};
  chunk = ChunkFrom(left, RingOp::SendId{1, 0}, 9, &bytes);
  ASSERT_TRUE(op.Accept(chunk, 1, 9).ok());
  op.Apply(chunk);
  op.Applied(chunk);
  EXPECT_EQ(data, (std::vector<float>{7, 8, 13, 24}));
  EXPECT_FALSE(op.Finished());  // Two sends not yet acknowledged.
  op.SendDone(true);
  op.SendDone(true);
  EXPECT_TRUE(op.Finished());
  EXPECT_TRUE(op.error().ok());
}

TEST(RingOpTest, BadChunksAreRefusedAndFailTheOp) {
  std::vector<float> data(4), left_data(4);
  RingOp left(0, absl::MakeSpan(left_data), RingPlan(2, 1, 4, 2),
              absl::InfiniteFuture());
  std::string bytes;
  const RingChunkView good = ChunkFrom(left, RingOp::SendId{0, 0}, 9, &bytes);
  struct Case {
    const char* what;
    RingChunkView chunk;
    absl::StatusCode code;
  };
  std::vector<Case> cases;
  RingChunkView c = good;
  c.sender_rank = 0;
  cases.push_back({"wrong sender", c, absl::StatusCode::kFailedPrecondition});
  c = good;
  c.session = 8;
  cases.push_back({"stale session", c, absl::StatusCode::kFailedPrecondition});
  c = good;
  c.total_elements = 5;
  cases.push_back({"other length", c, absl::StatusCode::kInvalidArgument});
  c = good;
  c.step = 2;
  cases.push_back({"step", c, absl::StatusCode::kInvalidArgument});
  c = good;
  c.chunk = 1;
  cases.push_back({"chunk", c, absl::StatusCode::kInvalidArgument});
  c = good;
  c.data = c.data.substr(4);
  cases.push_back({"payload size", c, absl::StatusCode::kInvalidArgument});
  for (const Case& bad : cases) {
    RingOp op(0, absl::MakeSpan(data), RingPlan(2, 0, 4, 2),
              absl::InfiniteFuture());
    const absl::Status status = op.Accept(bad.chunk, 1, 9);
    EXPECT_EQ(status.code(), bad.code) << bad.what << ": " << status;
    EXPECT_EQ(op.error(), status) << bad.what;
    EXPECT_TRUE(op.FinishedOrFailed());
    EXPECT_TRUE(op.TakeReady(4).empty()) << bad.what;  // A failed op sends not.
    // Even a good chunk is refused now.
    EXPECT_EQ(op.Accept(good, 1, 9).code(), absl::StatusCode::kAborted);
  }
  RingOp op(0, absl::MakeSpan(data), RingPlan(2, 0, 4, 2),
            absl::InfiniteFuture());
  ASSERT_TRUE(op.Accept(good, 1, 9).ok());
  EXPECT_EQ(op.Accept(good, 1, 9).code(), absl::StatusCode::kInvalidArgument);
}

// Three ops passing chunks by hand around the ring. The values are chosen
// so that the order of the additions shows: segment k is summed as rank k's
// value, plus rank k + 1's, plus rank k + 2's; 1 + 1e8 rounds to 1e8 in
// fp32, so every element ends 0 on every rank (summing 1e8 and -1e8 first
// would give the true sum, 1).
TEST(RingOpTest, ThreeOpsByHandSumEachSegmentInRingOrder) {
  const int n = 3;
  std::vector<std::vector<float>> data = {
      {1, -1e8f, 1e8f}, {1e8f, 1, -1e8f}, {-1e8f, 1e8f, 1}};
  std::vector<RingOp> ops;
  ops.reserve(n);
  for (int r = 0; r < n; ++r) {
    ops.emplace_back(0, absl::MakeSpan(data[r]), RingPlan(n, r, 3, 1),
                     absl::InfiniteFuture());
  }
  std::string bytes;
  for (int round = 0; round < 10; ++round) {
    for (int r = 0; r < n; ++r) {
      RingOp& right = ops[(r + 1) % n];
      for (const RingOp::SendId& send : ops[r].TakeReady(1)) {
        const RingChunkView chunk = ChunkFrom(ops[r], send, 100 + r, &bytes);
        ASSERT_TRUE(right.Accept(chunk, r, 100 + r).ok());
        right.Apply(chunk);
        right.Applied(chunk);
        ops[r].SendDone(true);
      }
    }
  }
  for (int r = 0; r < n; ++r) {
    EXPECT_TRUE(ops[r].Finished()) << "rank " << r;
    EXPECT_EQ(data[r], (std::vector<float>{0, 0, 0})) << "rank " << r;
  }
}

}  // namespace
}  // namespace lockstep
