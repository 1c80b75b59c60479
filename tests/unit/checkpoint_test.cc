#include "server/core/checkpoint.h"

#include <sys/stat.h>
#include <sys/time.h>
#include <unistd.h>

#include <cstdio>
#include <fstream>
#include <optional>
#include <sstream>
#include <string>
#include <vector>

#include "absl/strings/str_cat.h"
#include "common/base/env.h"
#include "gmock/gmock.h"
#include "gtest/gtest.h"
#include "server/core/parameter_server.h"
#include "tests/unit/chunk_reply_test_util.h"

namespace lockstep {
namespace {

using ::testing::ElementsAre;
using ::testing::HasSubstr;
using ::testing::SizeIs;

std::string TempDir() {
  std::string dir = ::testing::TempDir() + "/ckpt.XXXXXX";
  if (mkdtemp(dir.data()) == nullptr) std::abort();
  return dir;
}

std::string Slurp(const std::string& path) {
  std::ifstream in(path, std::ios::binary);
  std::stringstream s;
  s << in.rdbuf();
  return s.str();
}

void Spit(const std::string& path, const std::string& bytes) {
  std::ofstream(path, std::ios::binary) << bytes;
}

ModelSignature Signature() {
  ModelSignature s;
  s.tensors = {{"dense_0/kernel", {2, 2}}, {"dense_0/bias", {2}}};
  s.optimizer = OptimizerConfig::Defaults("adam");
  s.num_workers = 2;
  return s;
}

ShardCheckpoint Example(int64_t version) {
  ShardCheckpoint c;
  c.signature = Signature();
  c.num_workers = 2;
  c.version = version;
  ChunkState chunk;
  chunk.chunk = 0;
  chunk.version = version;
  chunk.weights = {0.5f, -1.25f, 3.0f, 7.5f, -0.125f, 9.0f};
  chunk.slots = {{"m", {1, 2, 3, 4, 5, 6}}, {"v", {6, 5, 4, 3, 2, 1}}};
  c.chunks.push_back(chunk);
  return c;
}

TEST(CheckpointFormatTest, RoundTripsExactly) {
  const ShardCheckpoint original = Example(42);
  absl::StatusOr<ShardCheckpoint> back =
      DecodeCheckpoint(EncodeCheckpoint(original));
  ASSERT_TRUE(back.ok()) << back.status();
  EXPECT_EQ(back->version, 42);
  EXPECT_EQ(back->num_workers, 2);
  EXPECT_TRUE(DescribeDifference(back->signature, original.signature).empty());
  ASSERT_THAT(back->chunks, SizeIs(1));
  EXPECT_EQ(back->chunks[0].weights, original.chunks[0].weights);
  EXPECT_EQ(back->chunks[0].slots, original.chunks[0].slots);
}

TEST(CheckpointFormatTest, DamageIsDetected) {
  const std::string good = EncodeCheckpoint(Example(1));
  std::string flipped = good;
  flipped[flipped.size() - 3] ^= 0x10;  // Inside the last tensor.
  std::string header = good;
  header[30] ^= 0x01;  // Inside the header.
  std::string magic = good;
  magic[0] = 'X';
  std::string format = good;
  format[8] = 9;
  for (const auto& [bytes, words] : std::vector<std::pair<std::string, std::string>>{
           {flipped, "checksum mismatch in tensor v"},
           {good.substr(0, good.size() - 1), "truncated"},
           {good.substr(0, 10), "preamble"},
           {header, "header checksum"},
           {magic, "bad magic"},
           {format, "format version 9"},
           // The file's own length: an appended tail is damage too.
           {good + "junk", "4 bytes after the last tensor"}}) {
    absl::StatusOr<ShardCheckpoint> c = DecodeCheckpoint(bytes);
    EXPECT_EQ(c.status().code(), absl::StatusCode::kDataLoss) << words;
    EXPECT_THAT(std::string(c.status().message()), HasSubstr(words));
  }
}

TEST(CheckpointStoreTest, KeepsTheNewestAndFallsBackPastDamage) {
  const std::string dir = TempDir();
  auto store = CheckpointStore::Create(dir + "/a/b", 0, 1, /*keep=*/3);
  ASSERT_TRUE(store.ok()) << store.status();
  std::vector<std::string> notes;
  auto none = (*store)->LoadNewest(&notes);
  ASSERT_TRUE(none.ok());
  EXPECT_FALSE(none->has_value());
  for (int64_t v : {5, 10, 15, 20, 25}) ASSERT_TRUE((*store)->Save(Example(v)).ok());
  std::vector<std::string> files = (*store)->List();
  ASSERT_THAT(files, SizeIs(3));
  EXPECT_THAT(files.back(), HasSubstr("ckpt-000000000025.lsc"));
  // A leftover temporary file (a crash mid-write) is not read, and removed
  // once nobody has written it for 10 minutes; a recent one may be a
  // predecessor's write still under way, and stays.
  const std::string leftover =
      absl::StrCat(dir, "/a/b/shard-0-of-1/ckpt-000000000030.lsc.tmp");
  Spit(leftover, "partial");
  const timeval eleven_minutes_ago[2] = {{time(nullptr) - 660, 0},
                                         {time(nullptr) - 660, 0}};
  ASSERT_EQ(utimes(leftover.c_str(), eleven_minutes_ago), 0);
  const std::string recent =
      absl::StrCat(dir, "/a/b/shard-0-of-1/ckpt-000000000035.lsc.tmp");
  Spit(recent, "being written");
  const std::string other = absl::StrCat(dir, "/a/b/shard-0-of-1/notes.tmp");
  Spit(other, "not ours");
  auto newest = (*store)->LoadNewest(&notes);
  ASSERT_TRUE(newest.ok() && newest->has_value());
  EXPECT_EQ((*newest)->version, 25);
  ASSERT_THAT(notes, SizeIs(1));
  EXPECT_THAT(notes[0], HasSubstr("removed " + leftover));
  EXPECT_NE(access(leftover.c_str(), F_OK), 0);
  EXPECT_EQ(Slurp(other), "not ours") << "only checkpoint files are removed";
  EXPECT_EQ(Slurp(recent), "being written");
  notes.clear();
  // Damage the newest (a flipped bit) and truncate the next: the oldest kept
  // one loads, and both are reported.
  std::string bytes = Slurp(files[2]);
  bytes[bytes.size() - 1] ^= 0x01;
  Spit(files[2], bytes);
  Spit(files[1], Slurp(files[1]).substr(0, 40));
  auto fallback = (*store)->LoadNewest(&notes);
  ASSERT_TRUE(fallback.ok() && fallback->has_value());
  EXPECT_EQ((*fallback)->version, 15);
  ASSERT_THAT(notes, SizeIs(2));
  EXPECT_THAT(notes[0], HasSubstr("falling back"));
  EXPECT_FALSE(CheckpointStore::Create(dir, 0, 1, 0).ok());
}

// With one checkpoint kept, a corrupt newer file must not outlive the good
// ones: loading sets it aside, so that the next save keeps itself.
TEST(CheckpointStoreTest, ACorruptNewerFileDoesNotOutliveTheGoodOnes) {
  const std::string dir = TempDir();
  auto store = CheckpointStore::Create(dir, 0, 1, /*keep=*/1);
  ASSERT_TRUE(store.ok()) << store.status();
  const std::string path30 = dir + "/shard-0-of-1/ckpt-000000000030.lsc";
  ASSERT_TRUE((*store)->Save(Example(30)).ok());
  std::string bytes = Slurp(path30);
  ASSERT_FALSE(bytes.empty());
  bytes[bytes.size() - 1] ^= 0x01;
  Spit(path30, bytes);
  // An older version saved after it (a restore from an older one, say):
  // it keeps itself, and 30 stays, corrupt.
  ASSERT_TRUE((*store)->Save(Example(20)).ok());
  ASSERT_THAT((*store)->List(), SizeIs(2));
  std::vector<std::string> notes;
  auto loaded = (*store)->LoadNewest(&notes);
  ASSERT_TRUE(loaded.ok() && loaded->has_value());
  EXPECT_EQ((*loaded)->version, 20);
  ASSERT_THAT(notes, SizeIs(1));
  EXPECT_THAT(notes[0], HasSubstr("set aside as"));
  absl::StatusOr<std::string> saved = (*store)->Save(Example(25));
  ASSERT_TRUE(saved.ok());
  EXPECT_THAT((*store)->List(), ElementsAre(*saved));
  EXPECT_EQ(Slurp(path30 + ".corrupt"), bytes);
}

// Every checkpoint damaged: the load finds none, says none is left, and
// SetAside names them all, this load's and an earlier one's.
TEST(CheckpointStoreTest, WhenEveryCheckpointIsDamagedSetAsideNamesThem) {
  const std::string dir = TempDir();
  auto store = CheckpointStore::Create(dir, 0, 1, /*keep=*/3);
  ASSERT_TRUE(store.ok()) << store.status();
  EXPECT_TRUE((*store)->SetAside().empty());
  for (int64_t v : {10, 20}) ASSERT_TRUE((*store)->Save(Example(v)).ok());
  const std::vector<std::string> files = (*store)->List();
  ASSERT_THAT(files, SizeIs(2));
  for (const std::string& path : files) Spit(path, Slurp(path) + "tail");
  std::vector<std::string> notes;
  auto loaded = (*store)->LoadNewest(&notes);
  ASSERT_TRUE(loaded.ok()) << loaded.status();
  EXPECT_FALSE(loaded->has_value());
  ASSERT_THAT(notes, SizeIs(2));
  EXPECT_THAT(notes[0], HasSubstr("falling back to the previous one"));
  EXPECT_THAT(notes[1], HasSubstr("no earlier checkpoint is left"));
  EXPECT_THAT((*store)->SetAside(),
              ElementsAre(files[0] + ".corrupt", files[1] + ".corrupt"));
  // A later load: nothing to read, and still the same two set aside.
  notes.clear();
  loaded = (*store)->LoadNewest(&notes);
  ASSERT_TRUE(loaded.ok());
  EXPECT_FALSE(loaded->has_value());
  EXPECT_THAT((*store)->SetAside(), SizeIs(2));
}

// A shard folder that is a file is found at start, not at the first save.
TEST(CheckpointStoreTest, AFolderInTheWayIsRefusedAtCreate) {
  const std::string dir = TempDir();
  Spit(dir + "/shard-0-of-1", "not a folder");
  auto store = CheckpointStore::Create(dir, 0, 1, 3);
  ASSERT_FALSE(store.ok());
  EXPECT_EQ(store.status().code(), absl::StatusCode::kFailedPrecondition);
  EXPECT_THAT(std::string(store.status().message()),
              HasSubstr("is not a writable directory"));
}

// An Env whose renames fail: a save through it is refused and leaves no
// file, complete or temporary.
class RenameRefusingEnv final : public FakeEnv {
 public:
  absl::Status RenameFile(const std::string& from,
                          const std::string& to) override {
    ++renames;
    return absl::InternalError(absl::StrCat("refused ", from, " -> ", to));
  }
  int renames = 0;
};

TEST(CheckpointStoreTest, SaveRenamesIntoPlaceThroughItsEnv) {
  const std::string dir = TempDir();
  RenameRefusingEnv env;
  auto store = CheckpointStore::Create(dir, 0, 1, 3, &env);
  ASSERT_TRUE(store.ok());
  const absl::StatusOr<std::string> saved = (*store)->Save(Example(7));
  ASSERT_FALSE(saved.ok());
  EXPECT_EQ(saved.status().code(), absl::StatusCode::kUnavailable);
  EXPECT_THAT(std::string(saved.status().message()),
              HasSubstr("ckpt-000000000007.lsc.tmp -> "));
  EXPECT_EQ(env.renames, 1);
  EXPECT_THAT((*store)->List(), SizeIs(0));
  EXPECT_NE(
      access(
          absl::StrCat(dir, "/shard-0-of-1/ckpt-000000000007.lsc.tmp").c_str(),
          F_OK),
      0)
      << "the temporary file is removed";
}

// A checkpoint that cannot be read is not known to be damaged: the load
// fails and leaves it, rather than set it aside and restore an older one.
// (A folder under a checkpoint's name: reading it fails even for root.)
TEST(CheckpointStoreTest, AnUnreadableCheckpointStopsTheLoad) {
  const std::string dir = TempDir();
  auto store = CheckpointStore::Create(dir, 0, 1, 3);
  ASSERT_TRUE(store.ok()) << store.status();
  ASSERT_TRUE((*store)->Save(Example(10)).ok());
  const std::string newer = dir + "/shard-0-of-1/ckpt-000000000020.lsc";
  ASSERT_EQ(mkdir(newer.c_str(), 0755), 0);
  std::vector<std::string> notes;
  auto loaded = (*store)->LoadNewest(&notes);
  ASSERT_FALSE(loaded.ok());
  EXPECT_THAT(std::string(loaded.status().message()),
              HasSubstr("cannot read " + newer));
  EXPECT_THAT(std::string(loaded.status().message()),
              HasSubstr("not set aside"));
  EXPECT_TRUE(notes.empty());
  EXPECT_EQ(access(newer.c_str(), F_OK), 0) << "left where it was";
}

// Pushes the same gradients from both workers and returns the reply.
std::vector<float> Step(ParameterServer& ps, const std::vector<int64_t>& inc,
                        int64_t step, const std::vector<float>& g) {
  std::optional<absl::StatusOr<ChunkSnapshot>> out;
  for (int rank = 0; rank < 2; ++rank) {
    ps.Push(rank, inc[rank], step, 0, WireDType::kFloat32, Bytes(g),
            [&](absl::StatusOr<ChunkSnapshot> r) { out = std::move(r); });
  }
  EXPECT_TRUE(out.has_value() && out->ok());
  return *(*out)->values;
}

// A restored server continues exactly where the saved one was: weights and
// Adam's moments and step count.
TEST(CheckpointServerTest, RestoredServerContinuesBitForBit) {
  auto a = ParameterServer::Create({2});
  ASSERT_TRUE(a.ok());
  std::vector<int64_t> inc;
  for (int rank = 0; rank < 2; ++rank) {
    auto reg = (*a)->Register(rank, Signature());
    ASSERT_TRUE(reg.ok());
    inc.push_back(reg->incarnation);
  }
  ASSERT_TRUE((*a)->Initialize(0, inc[0], 0, Bytes(Example(0).chunks[0].weights)).ok());
  const std::vector<float> g1 = {0.1f, -0.2f, 0.3f, 0.05f, -0.5f, 0.25f};
  const std::vector<float> g2 = {-0.3f, 0.2f, 0.01f, 0.4f, 0.5f, -0.25f};
  Step(**a, inc, 0, g1);
  Step(**a, inc, 1, g2);
  absl::StatusOr<ShardCheckpoint> saved = (*a)->Snapshot(absl::Seconds(5));
  ASSERT_TRUE(saved.ok()) << saved.status();
  EXPECT_EQ(saved->version, 2);
  ASSERT_THAT(saved->chunks[0].slots, SizeIs(2));

  auto b = ParameterServer::Create({2});
  ASSERT_TRUE(b.ok());
  absl::StatusOr<ShardCheckpoint> loaded =
      DecodeCheckpoint(EncodeCheckpoint(*saved));
  ASSERT_TRUE(loaded.ok());
  ASSERT_TRUE((*b)->Restore(*loaded).ok());
  EXPECT_EQ((*b)->GetStatus().version, 2);
  std::vector<int64_t> inc_b;
  for (int rank = 0; rank < 2; ++rank) {
    auto reg = (*b)->Register(rank, Signature());
    ASSERT_TRUE(reg.ok());
    EXPECT_FALSE(reg->must_initialize);
    EXPECT_EQ(reg->version, 2);
    inc_b.push_back(reg->incarnation);
  }
  EXPECT_EQ(Step(**b, inc_b, 2, g1), Step(**a, inc, 2, g1));
  // Another model, or another layout, is refused.
  ModelSignature other = Signature();
  other.tensors[1].shape = {3};
  EXPECT_EQ((*b)->Register(1, other).status().code(),
            absl::StatusCode::kFailedPrecondition);
  auto c = ParameterServer::Create({3});
  absl::Status layout = (*c)->Restore(*loaded);
  EXPECT_EQ(layout.code(), absl::StatusCode::kFailedPrecondition);
  EXPECT_THAT(std::string(layout.message()), HasSubstr("2 workers"));
}

}  // namespace
}  // namespace lockstep
