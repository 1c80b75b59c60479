// ShardRestorer: what a starting shard restores from a folder of
// checkpoints (intact, damaged, none) or another job's (--init_from).
#include "server/daemon/shard_restorer.h"

#include <memory>
#include <optional>
#include <string>
#include <utility>

#include "absl/strings/str_cat.h"
#include "common/base/env.h"
#include "gmock/gmock.h"
#include "gtest/gtest.h"
#include "server/core/checkpoint.h"
#include "tests/unit/daemon_test_util.h"

namespace lockstep {
namespace {

using ::testing::ElementsAre;
using ::testing::HasSubstr;
using ::testing::IsEmpty;
using ::testing::StartsWith;

class ShardRestorerTest : public ::testing::Test {
 protected:
  std::unique_ptr<CheckpointStore> Store(const std::string& dir) {
    auto store = CheckpointStore::Create(dir, 0, 1, 3, Env::Default());
    if (!store.ok()) std::abort();
    return *std::move(store);
  }
  absl::StatusOr<std::optional<int64_t>> Restore(CheckpointStore* store,
                                                 bool allow_fresh_start = false,
                                                 std::string init_from = "") {
    ShardRestorer::Options options;
    options.checkpoint_dir = dir_;
    options.init_from = std::move(init_from);
    options.allow_fresh_start = allow_fresh_start;
    ShardRestorer restorer(options, store, core_.get(), log_.Log());
    return restorer.Restore();
  }
  int64_t Version() { return core_->GetStatus().version; }
  // A checkpoint of version 10 that does not read back.
  void Damage() {
    ASSERT_TRUE(Env::Default()->CreateDirs(dir_ + "/shard-0-of-1").ok());
    ASSERT_TRUE(WriteFileAtomically(
                    dir_ + "/shard-0-of-1/ckpt-000000000010.lsc", "garbage")
                    .ok());
  }

  const std::string dir_ = NewTempDir();
  FakeEnv clock_;
  std::unique_ptr<ParameterServer> core_ = TwoWorkerCore(&clock_);
  LogLines log_;
};

TEST_F(ShardRestorerTest, WithoutAFolderOrInitFromTheJobIsNew) {
  auto restored = Restore(nullptr);
  ASSERT_TRUE(restored.ok()) << restored.status();
  EXPECT_EQ(*restored, std::nullopt);
  EXPECT_EQ(Version(), -1);
  EXPECT_THAT(log_.lines, IsEmpty());
}

TEST_F(ShardRestorerTest, AnEmptyFolderIsANewJob) {
  auto store = Store(dir_);
  auto restored = Restore(store.get());
  ASSERT_TRUE(restored.ok()) << restored.status();
  EXPECT_EQ(*restored, std::nullopt);
  EXPECT_EQ(Version(), -1);
  EXPECT_THAT(log_.lines, IsEmpty());
}

TEST_F(ShardRestorerTest, RestoresTheNewestCheckpoint) {
  auto store = Store(dir_);
  ASSERT_TRUE(store->Save(CheckpointAt(10)).ok());
  ASSERT_TRUE(store->Save(CheckpointAt(12)).ok());
  auto restored = Restore(store.get());
  ASSERT_TRUE(restored.ok()) << restored.status();
  EXPECT_EQ(*restored, 12);
  EXPECT_EQ(Version(), 12);
  EXPECT_THAT(log_.lines,
              ElementsAre(absl::StrCat("restored version 12 from ", dir_)));
}

TEST_F(ShardRestorerTest, OnlyDamagedCheckpointsRefuseAFreshStart) {
  Damage();
  auto store = Store(dir_);
  auto restored = Restore(store.get());
  EXPECT_EQ(restored.status().code(), absl::StatusCode::kDataLoss);
  const std::string message(restored.status().message());
  EXPECT_THAT(message, StartsWith(absl::StrCat("no intact checkpoint in ", dir_,
                                               ", only damaged ones: ")));
  EXPECT_THAT(message, HasSubstr("--allow_fresh_start"));
  EXPECT_EQ(log_.lines.back(), message);
  EXPECT_EQ(Version(), -1);
}

TEST_F(ShardRestorerTest, AllowFreshStartStartsFromVersionZero) {
  Damage();
  auto store = Store(dir_);
  auto restored = Restore(store.get(), /*allow_fresh_start=*/true);
  ASSERT_TRUE(restored.ok()) << restored.status();
  EXPECT_EQ(*restored, std::nullopt);
  EXPECT_EQ(Version(), -1);
  EXPECT_EQ(log_.lines.back(),
            absl::StrCat("no intact checkpoint in ", dir_,
                         " (1 damaged, set aside); starting from version 0 "
                         "as --allow_fresh_start asks"));
}

TEST_F(ShardRestorerTest, InitFromStartsFromAnotherJobsCheckpoint) {
  const std::string other = NewTempDir();
  ASSERT_TRUE(Store(other)->Save(CheckpointAt(7)).ok());
  auto store = Store(dir_);
  auto restored = Restore(store.get(), false, other);
  ASSERT_TRUE(restored.ok()) << restored.status();
  EXPECT_EQ(*restored, std::nullopt) << "not from this job's folder";
  EXPECT_EQ(Version(), 7);
  EXPECT_THAT(log_.lines,
              ElementsAre(absl::StrCat("starting from version 7 of ", other)));
}

TEST_F(ShardRestorerTest, TheJobsOwnCheckpointWinsOverInitFrom) {
  const std::string other = NewTempDir();
  ASSERT_TRUE(Store(other)->Save(CheckpointAt(7)).ok());
  auto store = Store(dir_);
  ASSERT_TRUE(store->Save(CheckpointAt(12)).ok());
  auto restored = Restore(store.get(), false, other);
  ASSERT_TRUE(restored.ok()) << restored.status();
  EXPECT_EQ(*restored, 12);
  EXPECT_EQ(Version(), 12);
}

TEST_F(ShardRestorerTest, AnUnreadableInitFromIsAnError) {
  const std::string missing = dir_ + "/missing";
  auto restored = Restore(nullptr, false, missing);
  EXPECT_FALSE(restored.ok());
  ASSERT_EQ(log_.lines.size(), 1u);
  EXPECT_THAT(log_.lines[0],
              StartsWith(absl::StrCat("cannot start from --init_from=", missing,
                                      ": ")));
  EXPECT_EQ(Version(), -1);
}

}  // namespace
}  // namespace lockstep
