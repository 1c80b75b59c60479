// StandbyState (server/daemon/standby_state.h): the state a standby takes
// over with, from states whose chunks are one version apart.
#include "server/daemon/standby_state.h"

#include <vector>

#include "gmock/gmock.h"
#include "gtest/gtest.h"

namespace lockstep {
namespace {

using ::testing::HasSubstr;

// A chunk whose weight and Adam slot both say its chunk and version.
ChunkState Chunk(int chunk, int64_t version) {
  const float mark = static_cast<float>(chunk * 1000 + version);
  return ChunkState{chunk, version, {mark}, {{"m", {-mark}}}};
}

ShardCheckpoint State(std::vector<int64_t> versions,
                      SyncMode mode = SyncMode::kSync) {
  ShardCheckpoint state;
  state.signature.sync.mode = mode;
  state.version = versions[0];
  for (size_t c = 0; c < versions.size(); ++c) {
    state.chunks.push_back(Chunk(static_cast<int>(c), versions[c]));
    state.version = std::min(state.version, versions[c]);
  }
  return state;
}

std::vector<float> Marks(const ShardCheckpoint& state) {
  std::vector<float> out;
  for (const ChunkState& c : state.chunks) {
    out.push_back(c.weights[0]);
    out.push_back(c.slots[0].second[0]);
  }
  return out;
}

TEST(StandbyStateTest, HoldsNothingAtFirst) {
  StandbyState held;
  EXPECT_TRUE(held.empty());
  EXPECT_EQ(held.version(), -1);
  EXPECT_THAT(held.TakeOver().status().message(), HasSubstr("no state"));
}

TEST(StandbyStateTest, LinesChunksUpAtTheLowestVersion) {
  StandbyState held;
  held.Update(State({4, 4, 4}));
  held.Update(State({5, 4, 4}));  // Chunk 0's step 4 applied first.
  held.Update(State({5, 5, 4}));
  EXPECT_EQ(held.version(), 4);
  absl::StatusOr<ShardCheckpoint> state = held.TakeOver();
  ASSERT_TRUE(state.ok()) << state.status();
  EXPECT_EQ(state->version, 4);
  EXPECT_EQ(Marks(*state), Marks(State({4, 4, 4})));
  held.Update(State({5, 5, 5}));
  state = held.TakeOver();
  ASSERT_TRUE(state.ok()) << state.status();
  EXPECT_EQ(Marks(*state), Marks(State({5, 5, 5})));
}

TEST(StandbyStateTest, KeepsTheVersionBeforeAcrossRepeatedStates) {
  StandbyState held;
  held.Update(State({7, 7}));
  held.Update(State({8, 7}));
  held.Update(State({8, 7}));  // Nothing moved: chunk 0's 7 is kept.
  absl::StatusOr<ShardCheckpoint> state = held.TakeOver();
  ASSERT_TRUE(state.ok()) << state.status();
  EXPECT_EQ(Marks(*state), Marks(State({7, 7})));
}

TEST(StandbyStateTest, RefusesAChunkWhoseVersionWasNeverSent) {
  StandbyState held;
  held.Update(State({3, 2}));  // Attached mid-step: chunk 0's 2 unseen.
  absl::Status s = held.TakeOver().status();
  EXPECT_TRUE(absl::IsFailedPrecondition(s)) << s;
  EXPECT_THAT(s.message(), HasSubstr("chunk 0 is held at version 3 only"));
  held.Update(State({3, 3}));
  EXPECT_TRUE(held.TakeOver().ok());
}

TEST(StandbyStateTest, RefusesAChunkThatSkippedTheVersion) {
  StandbyState held;
  held.Update(State({2, 2}));
  held.Update(State({4, 3}));  // Chunk 0's 3 was never sent.
  absl::Status s = held.TakeOver().status();
  EXPECT_TRUE(absl::IsFailedPrecondition(s)) << s;
  EXPECT_THAT(s.message(), HasSubstr("chunk 0 is held at version 4 and 2"));
}

TEST(StandbyStateTest, AsynchronousStatesAreTakenAsTheyCame) {
  StandbyState held;
  held.Update(State({9, 3, 6}, SyncMode::kAsync));
  absl::StatusOr<ShardCheckpoint> state = held.TakeOver();
  ASSERT_TRUE(state.ok()) << state.status();
  EXPECT_EQ(state->version, 3);
  EXPECT_EQ(Marks(*state), Marks(State({9, 3, 6}, SyncMode::kAsync)));
}

}  // namespace
}  // namespace lockstep
