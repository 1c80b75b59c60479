// The checkpoint store and the weights-file writer driven through each
// fault of FaultInjectionEnv (torn write, full disk, failed fsync of the
// file or the folder, failed rename and read, a disk that loses synced data
// in a crash), in-process, as leveldb's db/fault_injection_test.cc. Each
// test asserts exactly what survives: the previous file still reads back
// with its exact values, no half-written file is taken as a checkpoint or
// as weights, and the error names the file and the cause.
#include <stdlib.h>
#include <unistd.h>

#include <algorithm>
#include <cstdlib>
#include <functional>
#include <memory>
#include <optional>
#include <string>
#include <vector>

#include "absl/strings/str_cat.h"
#include "absl/strings/str_format.h"
#include "common/base/env.h"
#include "common/formats/safetensors.h"
#include "common/testing/fault_injection_env.h"
#include "gmock/gmock.h"
#include "gtest/gtest.h"
#include "server/core/checkpoint.h"

namespace lockstep {
namespace {

using ::testing::AllOf;
using ::testing::ElementsAre;
using ::testing::HasSubstr;
using ::testing::IsEmpty;
using ::testing::Not;

std::string TempDir() {
  std::string dir = ::testing::TempDir() + "/fault.XXXXXX";
  if (mkdtemp(dir.data()) == nullptr) std::abort();
  return dir;
}

// Version `version`'s checkpoint; every value differs between versions.
ShardCheckpoint Example(int64_t version) {
  ShardCheckpoint c;
  c.signature.tensors = {{"dense_0/kernel", {2, 2}}, {"dense_0/bias", {2}}};
  c.signature.optimizer = OptimizerConfig::Defaults("adam");
  c.signature.num_workers = 2;
  c.num_workers = 2;
  c.version = version;
  ChunkState chunk;
  chunk.version = version;
  const float v = static_cast<float>(version);
  chunk.weights = {v + 0.5f, -v, 3.0f * v, 7.5f, -0.125f * v, 9.0f};
  chunk.slots = {{"m", {v, 2, 3, 4, 5, 6}}, {"v", {6, 5, 4, 3, 2, v}}};
  c.chunks.push_back(chunk);
  return c;
}

void ExpectIsExample(const ShardCheckpoint& c, int64_t version) {
  const ShardCheckpoint want = Example(version);
  EXPECT_EQ(c.version, version);
  EXPECT_EQ(c.signature.tensors, want.signature.tensors);
  ASSERT_EQ(c.chunks.size(), 1u);
  EXPECT_EQ(c.chunks[0].version, version);
  EXPECT_EQ(c.chunks[0].weights, want.chunks[0].weights);
  EXPECT_EQ(c.chunks[0].slots, want.chunks[0].slots);
}

// A shard folder holding version 10's checkpoint (keep 2), its store and
// Env; each test then injects a fault.
class CheckpointFaultTest : public ::testing::Test {
 protected:
  void SetUp() override {
    store_ = Open();
    ASSERT_TRUE(store_->Save(Example(10)).ok());
  }

  std::unique_ptr<CheckpointStore> Open() {
    auto store = CheckpointStore::Create(dir_, 0, 1, /*keep=*/2, &env_);
    if (!store.ok()) std::abort();
    return *std::move(store);
  }
  std::string Ckpt(int version, absl::string_view suffix = "") const {
    return absl::StrFormat("%s/ckpt-%012d.lsc%s", shard_, version, suffix);
  }
  // What the folder holds, by name, sorted.
  std::vector<std::string> Folder() {
    std::vector<std::string> names = *env_.GetChildren(shard_);
    std::sort(names.begin(), names.end());
    return names;
  }
  // What a restarted server restores: a new store over the folder.
  std::optional<ShardCheckpoint> Restart(std::vector<std::string>* notes) {
    absl::StatusOr<std::optional<ShardCheckpoint>> loaded =
        Open()->LoadNewest(notes);
    EXPECT_TRUE(loaded.ok()) << loaded.status();
    return loaded.ok() ? *loaded : std::nullopt;
  }

  const std::string dir_ = TempDir();
  const std::string shard_ = dir_ + "/shard-0-of-1";
  FakeEnv clock_;
  FaultInjectionEnv env_{&clock_};
  std::unique_ptr<CheckpointStore> store_;
};

struct SaveFault {
  const char* name;
  std::function<void(FaultInjectionEnv&)> inject;
  const char* cause;  // The failed call, as the message begins.
};

// Each fault of a save before the rename: refused, the temporary file
// removed, version 10 restored exactly after a restart, and a save after
// the fault ends succeeds.
TEST_F(CheckpointFaultTest, AFailedSaveLeavesThePreviousCheckpoint) {
  const std::vector<SaveFault> faults = {
      {"torn write", [](FaultInjectionEnv& e) { e.TearWritesAfter(100); },
       "cannot write"},
      {"full disk", [](FaultInjectionEnv& e) { e.FillDiskAfter(64); },
       "cannot write"},
      {"fsync", [](FaultInjectionEnv& e) { e.FailFileSyncs(); },
       "cannot fsync"},
      {"rename", [](FaultInjectionEnv& e) { e.FailRenames(); },
       "cannot rename"},
  };
  for (const SaveFault& fault : faults) {
    SCOPED_TRACE(fault.name);
    fault.inject(env_);
    const absl::StatusOr<std::string> saved = store_->Save(Example(20));
    env_.Heal();
    ASSERT_FALSE(saved.ok());
    EXPECT_EQ(saved.status().code(), absl::StatusCode::kUnavailable);
    EXPECT_THAT(std::string(saved.status().message()),
                HasSubstr(absl::StrCat(fault.cause, " ", Ckpt(20, ".tmp"))));
    EXPECT_THAT(Folder(), ElementsAre("ckpt-000000000010.lsc"));
    std::vector<std::string> notes;
    std::optional<ShardCheckpoint> restored = Restart(&notes);
    ASSERT_TRUE(restored.has_value());
    ExpectIsExample(*restored, 10);
    EXPECT_THAT(notes, IsEmpty());
  }
  EXPECT_EQ(env_.faults_injected(), 4);
  ASSERT_TRUE(store_->Save(Example(20)).ok());
  std::vector<std::string> notes;
  ExpectIsExample(*Restart(&notes), 20);
}

TEST_F(CheckpointFaultTest, TheErrorSaysWhyTheWriteFailed) {
  env_.FillDiskAfter(64);
  const absl::Status full = store_->Save(Example(20)).status();
  env_.Heal();
  EXPECT_THAT(std::string(full.message()),
              HasSubstr(absl::StrCat("cannot write ", Ckpt(20, ".tmp"),
                                     ": No space left on device")));
  env_.TearWritesAfter(100);
  const absl::Status torn = store_->Save(Example(20)).status();
  env_.Heal();
  EXPECT_THAT(std::string(torn.message()),
              HasSubstr(absl::StrCat("cannot write ", Ckpt(20, ".tmp"),
                                     ": Input/output error")));
}

// The folder's fsync fails after the rename: the error names the folder,
// the new file is whole but nothing older is pruned; after a crash the
// rename is undone and version 10 is what a restart restores.
TEST_F(CheckpointFaultTest, AFailedFolderSyncPrunesNothing) {
  ASSERT_TRUE(store_->Save(Example(20)).ok());
  env_.FailDirSyncs();
  const absl::Status saved = store_->Save(Example(30)).status();
  env_.Heal();
  EXPECT_EQ(saved.code(), absl::StatusCode::kUnavailable);
  EXPECT_THAT(
      std::string(saved.message()),
      HasSubstr(absl::StrCat("cannot fsync ", shard_, ": Input/output error")));
  EXPECT_THAT(store_->List(), ElementsAre(Ckpt(10), Ckpt(20), Ckpt(30)));
  ASSERT_TRUE(env_.SimulateCrash().ok());
  EXPECT_THAT(store_->List(), ElementsAre(Ckpt(10), Ckpt(20)));
  std::vector<std::string> notes;
  ExpectIsExample(*Restart(&notes), 20);
}

// A disk that loses synced data: the save said OK, and after the crash the
// newest file is empty. The restart sets it aside and restores version 10
// exactly; the damaged file is kept for a look, never loaded.
TEST_F(CheckpointFaultTest, ACheckpointLostInACrashIsNeverLoaded) {
  env_.LoseFileSyncs();
  ASSERT_TRUE(store_->Save(Example(20)).ok());
  env_.Heal();
  ASSERT_TRUE(env_.SimulateCrash().ok());
  EXPECT_EQ(*env_.ReadFile(Ckpt(20)), "");
  std::vector<std::string> notes;
  std::optional<ShardCheckpoint> restored = Restart(&notes);
  ASSERT_TRUE(restored.has_value());
  ExpectIsExample(*restored, 10);
  ASSERT_EQ(notes.size(), 1u);
  EXPECT_THAT(notes[0], AllOf(HasSubstr(Ckpt(20)),
                              HasSubstr("set aside as " + Ckpt(20, ".corrupt")),
                              HasSubstr("falling back to the previous one")));
  EXPECT_THAT(Open()->SetAside(), ElementsAre(Ckpt(20, ".corrupt")));
}

// A checkpoint that cannot be read may be intact: the load fails naming it
// and the cause, and moves nothing; once it reads, it is restored.
TEST_F(CheckpointFaultTest, AReadErrorStopsTheLoadAndMovesNothing) {
  ASSERT_TRUE(store_->Save(Example(20)).ok());
  env_.FailReads();
  std::vector<std::string> notes;
  const absl::Status loaded = Open()->LoadNewest(&notes).status();
  env_.Heal();
  EXPECT_EQ(loaded.code(), absl::StatusCode::kUnavailable);
  EXPECT_THAT(std::string(loaded.message()),
              AllOf(HasSubstr(absl::StrCat("cannot read ", Ckpt(20),
                                           ": Input/output error")),
                    HasSubstr("not set aside")));
  EXPECT_THAT(notes, IsEmpty());
  EXPECT_THAT(Folder(),
              ElementsAre("ckpt-000000000010.lsc", "ckpt-000000000020.lsc"));
  ExpectIsExample(*Restart(&notes), 20);
}

// A damaged newest checkpoint that cannot be renamed aside: the load still
// falls back to version 10, says nothing was set aside, and deletes
// nothing; a later load sets it aside.
TEST_F(CheckpointFaultTest, AFailedSetAsideStillFallsBackAndKeepsTheFile) {
  // Written past the fault-injecting Env: damage from outside.
  ASSERT_TRUE(WriteFileAtomically(Ckpt(20), "not a checkpoint", &clock_).ok());
  env_.FailRenames();
  std::vector<std::string> notes;
  std::optional<ShardCheckpoint> restored = Restart(&notes);
  env_.Heal();
  ASSERT_TRUE(restored.has_value());
  ExpectIsExample(*restored, 10);
  ASSERT_EQ(notes.size(), 1u);
  EXPECT_THAT(notes[0],
              AllOf(HasSubstr(Ckpt(20)), Not(HasSubstr("set aside"))));
  EXPECT_THAT(store_->List(), ElementsAre(Ckpt(10), Ckpt(20)));
  notes.clear();
  ExpectIsExample(*Restart(&notes), 10);
  EXPECT_THAT(Open()->SetAside(), ElementsAre(Ckpt(20, ".corrupt")));
}

// A weights file (the server's --weights_file, the worker's
// --dump_weights) written over an older one.
class WeightsFaultTest : public ::testing::Test {
 protected:
  void SetUp() override {
    ASSERT_TRUE(WriteSafetensors(path_, tensors_, kOld, &env_).ok());
  }
  std::vector<float> Read() {
    absl::StatusOr<std::vector<NamedTensor>> file = ReadSafetensors(path_);
    if (!file.ok()) return {};
    return *FlattenByName(tensors_, *file);
  }

  static constexpr float kOld[] = {1.5f, -2.0f, 0.25f, 8.0f, -0.5f};
  static constexpr float kNew[] = {-7.0f, 3.5f, 0.125f, -1.0f, 2.0f};
  const std::string dir_ = TempDir();
  const std::string path_ = dir_ + "/weights.safetensors";
  const std::vector<TensorInfo> tensors_ = {{"w", {2, 2}}, {"b", {1}}};
  FakeEnv clock_;
  FaultInjectionEnv env_{&clock_};
};

TEST_F(WeightsFaultTest, AFailedWriteLeavesTheOldWeights) {
  const std::vector<SaveFault> faults = {
      {"torn write", [](FaultInjectionEnv& e) { e.TearWritesAfter(40); },
       "cannot write"},
      {"full disk", [](FaultInjectionEnv& e) { e.FillDiskAfter(40); },
       "cannot write"},
      {"fsync", [](FaultInjectionEnv& e) { e.FailFileSyncs(); },
       "cannot fsync"},
      {"rename", [](FaultInjectionEnv& e) { e.FailRenames(); },
       "cannot rename"},
  };
  for (const SaveFault& fault : faults) {
    SCOPED_TRACE(fault.name);
    fault.inject(env_);
    const absl::Status written = WriteSafetensors(path_, tensors_, kNew, &env_);
    env_.Heal();
    EXPECT_EQ(written.code(), absl::StatusCode::kUnavailable);
    EXPECT_THAT(
        std::string(written.message()),
        HasSubstr(absl::StrCat("cannot write ", path_, ": ", fault.cause, " ",
                               path_, ".", getpid(), "-")));
    EXPECT_THAT(Read(), ElementsAre(1.5f, -2.0f, 0.25f, 8.0f, -0.5f));
    EXPECT_THAT(*env_.GetChildren(dir_), ElementsAre("weights.safetensors"));
  }
  ASSERT_TRUE(WriteSafetensors(path_, tensors_, kNew, &env_).ok());
  EXPECT_THAT(Read(), ElementsAre(-7.0f, 3.5f, 0.125f, -1.0f, 2.0f));
}

// The folder's fsync fails: an error naming the folder, and after a crash
// the old weights are back, exactly.
TEST_F(WeightsFaultTest, ACrashBeforeTheFolderSyncBringsTheOldWeightsBack) {
  env_.FailDirSyncs();
  const absl::Status written = WriteSafetensors(path_, tensors_, kNew, &env_);
  env_.Heal();
  EXPECT_THAT(std::string(written.message()),
              HasSubstr(absl::StrCat("cannot fsync ", dir_)));
  ASSERT_TRUE(env_.SimulateCrash().ok());
  EXPECT_THAT(Read(), ElementsAre(1.5f, -2.0f, 0.25f, 8.0f, -0.5f));
}

// A disk that loses synced data: the weights written are gone after the
// crash, and the empty file is refused, never read as weights.
TEST_F(WeightsFaultTest, WeightsLostInACrashAreRefused) {
  env_.LoseFileSyncs();
  ASSERT_TRUE(WriteSafetensors(path_, tensors_, kNew, &env_).ok());
  env_.Heal();
  ASSERT_TRUE(env_.SimulateCrash().ok());
  const absl::Status read = ReadSafetensors(path_, &env_).status();
  EXPECT_EQ(read.code(), absl::StatusCode::kDataLoss);
  EXPECT_THAT(std::string(read.message()),
              HasSubstr(path_ + ": safetensors: 0 bytes"));
}

}  // namespace
}  // namespace lockstep
