// GroupGenerations: a push's slot checks, and which rises of the required
// and seen generations give the gathered step up.
#include "server/core/group_generations.h"

#include "absl/status/status.h"
#include "gtest/gtest.h"

namespace lockstep {
namespace {

SyncPolicy Sync() { return SyncPolicy{}; }

TEST(GroupGenerationsTest, NoGenerationIsAlwaysFine) {
  GroupGenerations g(2);
  EXPECT_TRUE(g.CheckSlot(PushSlot{}, nullptr).ok());
  SyncPolicy async = Sync();
  async.mode = SyncMode::kAsync;
  EXPECT_TRUE(g.CheckSlot(PushSlot{}, &async).ok());
}

TEST(GroupGenerationsTest, SlotChecks) {
  GroupGenerations g(2);
  const SyncPolicy sync = Sync();
  absl::Status shard = g.CheckSlot(PushSlot{1, 2}, &sync);
  EXPECT_EQ(shard.code(), absl::StatusCode::kInvalidArgument);
  EXPECT_EQ(shard.message(),
            "group generation 1 batch shard 2: the shard must be in [0, 2) "
            "and the generation positive");
  EXPECT_EQ(g.CheckSlot(PushSlot{-1, 0}, &sync).code(),
            absl::StatusCode::kInvalidArgument);
  EXPECT_EQ(g.CheckSlot(PushSlot{1, -1}, &sync).code(),
            absl::StatusCode::kInvalidArgument);
  EXPECT_EQ(g.CheckSlot(PushSlot{1, 0}, nullptr).code(),
            absl::StatusCode::kFailedPrecondition)
      << "no job yet";
  SyncPolicy ssp = sync;
  ssp.mode = SyncMode::kSsp;
  EXPECT_EQ(g.CheckSlot(PushSlot{1, 0}, &ssp).code(),
            absl::StatusCode::kFailedPrecondition);
  SyncPolicy backups = sync;
  backups.backup_workers = 1;
  EXPECT_EQ(g.CheckSlot(PushSlot{1, 0}, &backups).code(),
            absl::StatusCode::kFailedPrecondition);
  EXPECT_TRUE(g.CheckSlot(PushSlot{1, 1}, &sync).ok());
}

TEST(GroupGenerationsTest, RequiringRefusesOlderGenerations) {
  GroupGenerations g(2);
  const SyncPolicy sync = Sync();
  EXPECT_TRUE(g.Require(3));
  EXPECT_FALSE(g.Require(3)) << "the same: no rise";
  EXPECT_FALSE(g.Require(2)) << "lower: no-op";
  absl::Status old = g.CheckSlot(PushSlot{2, 0}, &sync);
  EXPECT_EQ(old.code(), absl::StatusCode::kAborted);
  EXPECT_EQ(old.message(),
            "the worker group re-forms (generation 3, this push's is 2): a "
            "worker joins or leaves; join the group again");
  EXPECT_TRUE(g.CheckSlot(PushSlot{3, 0}, &sync).ok());
  EXPECT_TRUE(g.CheckSlot(PushSlot{4, 0}, &sync).ok());
  EXPECT_FALSE(g.Note(3)) << "required counts as seen";
  EXPECT_TRUE(g.Note(4));
  EXPECT_FALSE(g.Note(4));
  EXPECT_TRUE(g.Require(4)) << "seen is not required";
}

TEST(GroupGenerationsTest, NotingRefusesNothing) {
  GroupGenerations g(2);
  const SyncPolicy sync = Sync();
  EXPECT_TRUE(g.Note(5));
  EXPECT_FALSE(g.Note(1));
  EXPECT_TRUE(g.CheckSlot(PushSlot{1, 0}, &sync).ok())
      << "another shard refuses no generation (a restarted coordinator "
         "numbers from 1 again)";
}

TEST(GroupGenerationsTest, WhatALeaveMeans) {
  GroupGenerations g(2);
  GroupGenerations::Leaving plain = g.OnLeave();
  EXPECT_EQ(plain.regroup, 0);
  EXPECT_FALSE(plain.elastic);
  g.Note(2);
  GroupGenerations::Leaving other_shard = g.OnLeave();
  EXPECT_EQ(other_shard.regroup, 0);
  EXPECT_TRUE(other_shard.elastic);
  g.Require(3);
  GroupGenerations::Leaving coordinator = g.OnLeave();
  EXPECT_EQ(coordinator.regroup, 4);
  EXPECT_TRUE(coordinator.elastic);
}

TEST(GroupGenerationsTest, ReformingError) {
  absl::Status e = GroupGenerations::ReformingError(7);
  EXPECT_EQ(e.code(), absl::StatusCode::kAborted);
  EXPECT_EQ(e.message(),
            "the worker group re-forms (generation 7): a worker joins or "
            "leaves; this step was not applied, join the group again and "
            "push it again");
}

}  // namespace
}  // namespace lockstep
