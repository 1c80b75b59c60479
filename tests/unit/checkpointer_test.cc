// Checkpointer over a real CheckpointStore in a fresh folder and a core
// restored to a known version; faults from FaultInjectionEnv.
#include "server/daemon/checkpointer.h"

#include <memory>
#include <optional>
#include <string>
#include <utility>
#include <vector>

#include "absl/strings/str_cat.h"
#include "absl/time/clock.h"
#include "common/base/env.h"
#include "common/testing/fault_injection_env.h"
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

class CheckpointerTest : public ::testing::Test {
 protected:
  void SetUp() override {
    auto store = CheckpointStore::Create(dir_, 0, 1, /*keep=*/3, &env_);
    ASSERT_TRUE(store.ok()) << store.status();
    store_ = *std::move(store);
    ASSERT_TRUE(core_->Restore(CheckpointAt(10)).ok());
  }

  std::unique_ptr<Checkpointer> Make(int64_t every_steps) {
    Checkpointer::Options options;
    options.every_steps = every_steps;
    return std::make_unique<Checkpointer>(options, store_.get(), core_.get(),
                                          nullptr, log_.Log());
  }
  std::string Ckpt(int version) const {
    return absl::StrCat(dir_, "/shard-0-of-1/ckpt-0000000000", version, ".lsc");
  }
  // The newest checkpoint a restarted server would load.
  std::optional<ShardCheckpoint> Newest() {
    std::vector<std::string> notes;
    auto newest = store_->LoadNewest(&notes);
    EXPECT_TRUE(newest.ok()) << newest.status();
    return newest.ok() ? *newest : std::nullopt;
  }

  const std::string dir_ = NewTempDir();
  FakeEnv clock_;
  FaultInjectionEnv env_{&clock_};
  std::unique_ptr<CheckpointStore> store_;
  std::unique_ptr<ParameterServer> core_ = TwoWorkerCore(&clock_);
  LogLines log_;
};

TEST_F(CheckpointerTest, SavesTheNewestVersionAndSaysWhere) {
  auto checkpointer = Make(0);
  auto saved = checkpointer->Save();
  ASSERT_TRUE(saved.ok()) << saved.status();
  EXPECT_EQ(saved->first, Ckpt(10));
  EXPECT_EQ(saved->second, 10);
  EXPECT_EQ(checkpointer->last_saved_version(), 10);
  EXPECT_THAT(log_.lines, ElementsAre(absl::StrCat(
                              "checkpoint of version 10 in ", Ckpt(10))));
  std::optional<ShardCheckpoint> newest = Newest();
  ASSERT_TRUE(newest.has_value());
  EXPECT_EQ(newest->version, 10);
  ASSERT_EQ(newest->chunks.size(), 1u);
  EXPECT_EQ(newest->chunks[0].weights, WeightsAt(10));
}

TEST_F(CheckpointerTest, SaveUnsavedSavesAVersionOnce) {
  auto checkpointer = Make(0);
  ASSERT_TRUE(checkpointer->SaveUnsaved().ok());
  ASSERT_TRUE(checkpointer->SaveUnsaved().ok());
  EXPECT_THAT(log_.lines, ElementsAre(absl::StrCat(
                              "checkpoint of version 10 in ", Ckpt(10))));
}

TEST_F(CheckpointerTest, ARestoredVersionIsNotSavedAgain) {
  auto checkpointer = Make(1);
  checkpointer->Restored(10);
  EXPECT_EQ(checkpointer->last_saved_version(), 10);
  ASSERT_TRUE(checkpointer->SaveUnsaved().ok());
  checkpointer->SaveIfDue(absl::Now() + absl::Hours(1));
  EXPECT_THAT(log_.lines, IsEmpty());
  EXPECT_FALSE(Newest().has_value());
}

TEST_F(CheckpointerTest, APeriodicSaveIsDueByItsSteps) {
  auto checkpointer = Make(11);
  checkpointer->SaveIfDue(absl::Now());
  EXPECT_THAT(log_.lines, IsEmpty()) << "10 steps of 11";
  auto saving = Make(10);
  saving->SaveIfDue(absl::Now());
  EXPECT_THAT(log_.lines, ElementsAre(absl::StrCat(
                              "checkpoint of version 10 in ", Ckpt(10))));
}

TEST_F(CheckpointerTest, AFailedPeriodicSaveWaitsBeforeItsNextTry) {
  auto checkpointer = Make(1);
  env_.FailRenames();
  const absl::Time now = absl::Now();
  checkpointer->SaveIfDue(now);
  ASSERT_EQ(log_.lines.size(), 1u);
  EXPECT_THAT(log_.lines[0], StartsWith("checkpoint failed: UNAVAILABLE"));
  EXPECT_THAT(log_.lines[0], HasSubstr("; next try in 5s"));
  const int64_t faults = env_.faults_injected();
  EXPECT_GT(faults, 0);
  checkpointer->SaveIfDue(now + absl::Seconds(4));
  EXPECT_EQ(env_.faults_injected(), faults) << "not tried again";
  EXPECT_EQ(log_.lines.size(), 1u);
  checkpointer->SaveIfDue(now + absl::Seconds(5));
  ASSERT_EQ(log_.lines.size(), 2u);
  EXPECT_THAT(log_.lines[1], HasSubstr("; next try in 10s"));
  env_.Heal();
  checkpointer->SaveIfDue(now + absl::Seconds(15));
  ASSERT_EQ(log_.lines.size(), 3u);
  EXPECT_EQ(log_.lines[2],
            absl::StrCat("checkpoint of version 10 in ", Ckpt(10)));
  EXPECT_EQ(checkpointer->last_saved_version(), 10);
}

TEST_F(CheckpointerTest, NothingToSaveBeforeVersionZero) {
  FakeEnv clock;
  std::unique_ptr<ParameterServer> empty = TwoWorkerCore(&clock);
  Checkpointer checkpointer({}, store_.get(), empty.get(), nullptr, log_.Log());
  EXPECT_EQ(checkpointer.Save().status().code(),
            absl::StatusCode::kFailedPrecondition);
  EXPECT_TRUE(checkpointer.SaveUnsaved().ok()) << "-1 is nothing to save";
  EXPECT_THAT(log_.lines, IsEmpty());
}

}  // namespace
}  // namespace lockstep
