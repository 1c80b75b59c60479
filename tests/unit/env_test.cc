#include "common/base/env.h"

#include <stdlib.h>

#include <cerrno>
#include <cstdio>
#include <cstdlib>
#include <fstream>
#include <memory>
#include <string>

#include "absl/strings/str_cat.h"
#include "absl/time/time.h"
#include "gmock/gmock.h"
#include "gtest/gtest.h"

namespace lockstep {
namespace {

using ::testing::ElementsAre;
using ::testing::IsEmpty;

TEST(FakeEnvTest, StandsStillUntilMoved) {
  FakeEnv env(absl::FromUnixSeconds(100));
  EXPECT_EQ(env.Now(), absl::FromUnixSeconds(100));
  EXPECT_EQ(env.Now(), absl::FromUnixSeconds(100));
  env.Advance(absl::Milliseconds(250));
  EXPECT_EQ(env.Now(), absl::FromUnixSeconds(100) + absl::Milliseconds(250));
  EXPECT_EQ(env.slept(), absl::ZeroDuration());
}

TEST(FakeEnvTest, SleepMovesTheClockAndIsCounted) {
  FakeEnv env(absl::FromUnixSeconds(0));
  env.SleepFor(absl::Seconds(3));
  env.SleepFor(absl::Seconds(-1));  // Ignored, as a real sleep would be.
  env.SleepFor(absl::Milliseconds(500));
  EXPECT_EQ(env.Now(), absl::FromUnixSeconds(0) + absl::Milliseconds(3500));
  EXPECT_EQ(env.slept(), absl::Milliseconds(3500));
}

TEST(EnvTest, DefaultFollowsTheRealClock) {
  Env* env = Env::Default();
  ASSERT_EQ(env, Env::Default());
  const absl::Time before = absl::Now();
  env->SleepFor(absl::Milliseconds(20));
  const absl::Time now = env->Now();
  EXPECT_GE(now - before, absl::Milliseconds(20));
  EXPECT_LT(now - before, absl::Seconds(30));
}

TEST(EnvTest, RenameMovesAFileAndNamesBothOnFailure) {
  const std::string dir = ::testing::TempDir();
  const std::string from = dir + "/env_test_from";
  const std::string to = dir + "/env_test_to";
  { std::ofstream(from) << "payload"; }
  ASSERT_TRUE(Env::Default()->RenameFile(from, to).ok());
  std::ifstream in(to);
  std::string text;
  in >> text;
  EXPECT_EQ(text, "payload");
  const absl::Status missing = Env::Default()->RenameFile(from, to);
  EXPECT_EQ(missing.code(), absl::StatusCode::kNotFound);
  EXPECT_NE(missing.message().find(from), absl::string_view::npos);
  EXPECT_NE(missing.message().find(to), absl::string_view::npos);
  std::remove(to.c_str());
}

std::string NewTempDir() {
  std::string dir = ::testing::TempDir() + "/env.XXXXXX";
  if (mkdtemp(dir.data()) == nullptr) std::abort();
  return dir;
}

TEST(EnvTest, WritesReadsListsAndRemovesAFile) {
  Env* env = Env::Default();
  const std::string dir = NewTempDir();
  const std::string path = dir + "/file";
  absl::StatusOr<std::unique_ptr<WritableFile>> file =
      env->NewWritableFile(path);
  ASSERT_TRUE(file.ok()) << file.status();
  ASSERT_TRUE((*file)->Append("ab").ok());
  ASSERT_TRUE((*file)->Append(std::string("c\0d", 3)).ok());
  ASSERT_TRUE((*file)->Sync().ok());
  ASSERT_TRUE((*file)->Close().ok());
  EXPECT_EQ(*env->ReadFile(path), std::string("abc\0d", 5));
  const absl::StatusOr<FileInfo> info = env->Stat(path);
  ASSERT_TRUE(info.ok()) << info.status();
  EXPECT_FALSE(info->is_directory);
  EXPECT_EQ(info->size, 5);
  EXPECT_TRUE(env->Stat(dir)->is_directory);
  EXPECT_THAT(*env->GetChildren(dir), ElementsAre("file"));
  EXPECT_TRUE(env->SyncDir(dir).ok());
  ASSERT_TRUE(env->RemoveFile(path).ok());
  EXPECT_THAT(*env->GetChildren(dir), IsEmpty());
  const absl::Status gone = env->ReadFile(path).status();
  EXPECT_EQ(gone.code(), absl::StatusCode::kNotFound);
  EXPECT_EQ(gone.message(),
            absl::StrCat("cannot open ", path, ": No such file or directory"));
}

TEST(EnvTest, CreateDirsMakesEveryMissingParentOnce) {
  Env* env = Env::Default();
  const std::string dir = NewTempDir() + "/a/b/c";
  ASSERT_TRUE(env->CreateDirs(dir).ok());
  ASSERT_TRUE(env->CreateDirs(dir).ok());
  EXPECT_TRUE(env->Stat(dir)->is_directory);
  EXPECT_TRUE(env->Stat(dir)->writable);
}

TEST(EnvTest, FileErrorSaysWhatWhereAndWhy) {
  const absl::Status full = FileError("cannot write", "/d/f", ENOSPC);
  EXPECT_EQ(full.code(), absl::StatusCode::kResourceExhausted);
  EXPECT_EQ(full.message(), "cannot write /d/f: No space left on device");
  EXPECT_EQ(FileError("cannot open", "/d/f", ENOENT).code(),
            absl::StatusCode::kNotFound);
  EXPECT_EQ(FileError("cannot fsync", "/d/f", EIO).code(),
            absl::StatusCode::kUnavailable);
}

TEST(EnvTest, DirNameIsTheFolderAPathIsIn) {
  EXPECT_EQ(DirName("/a/b/c.json"), "/a/b");
  EXPECT_EQ(DirName("/c.json"), "/");
  EXPECT_EQ(DirName("c.json"), ".");
}

TEST(EnvTest, WriteFileAtomicallyReplacesAndLeavesNoTemporaryFile) {
  Env* env = Env::Default();
  const std::string dir = NewTempDir();
  const std::string path = dir + "/summary.json";
  ASSERT_TRUE(WriteFileAtomically(path, "old").ok());
  ASSERT_TRUE(WriteFileAtomically(path, "new").ok());
  EXPECT_EQ(*env->ReadFile(path), "new");
  EXPECT_THAT(*env->GetChildren(dir), ElementsAre("summary.json"));
}

// Says every folder is one this process may not write (what a read-only
// mount or another user's folder looks like, which root cannot make).
class ReadOnlyFoldersEnv final : public FakeEnv {
 public:
  absl::StatusOr<FileInfo> Stat(const std::string& path) override {
    absl::StatusOr<FileInfo> info = Env::Stat(path);
    if (info.ok() && info->is_directory) info->writable = false;
    return info;
  }
};

// Outputs written at the end are checked at the start: why one cannot be
// written is said with what asked for it, and the check writes nothing.
TEST(EnvTest, CheckCanWriteFileSaysWhyAndWritesNothing) {
  Env* env = Env::Default();
  const std::string dir = NewTempDir();
  ASSERT_TRUE(WriteFileAtomically(dir + "/old", "kept").ok());
  EXPECT_TRUE(CheckCanWriteFile("--out", dir + "/new", env).ok());
  EXPECT_TRUE(CheckCanWriteFile("--out", dir + "/old", env).ok());
  EXPECT_THAT(*env->GetChildren(dir), ElementsAre("old"));  // No probe.
  EXPECT_EQ(*env->ReadFile(dir + "/old"), "kept");          // Not truncated.
  const auto why = [&](const std::string& path, Env* with = nullptr) {
    const absl::Status s = CheckCanWriteFile("--out", path, with ? with : env);
    EXPECT_EQ(s.code(), absl::StatusCode::kFailedPrecondition) << path;
    return std::string(s.message());
  };
  EXPECT_EQ(why(dir + "/missing/f"),
            absl::StrCat("--out: cannot write ", dir, "/missing/f: the folder ",
                         dir, "/missing does not exist"));
  EXPECT_EQ(why(dir + "/old/f"),
            absl::StrCat("--out: cannot write ", dir, "/old/f: ", dir,
                         "/old is not a directory"));
  EXPECT_EQ(why(dir),
            absl::StrCat("--out: cannot write ", dir, ": it is a directory"));
  EXPECT_EQ(why(dir + "/"),
            absl::StrCat("--out: cannot write ", dir, "/: it is a directory"));
  EXPECT_EQ(why(""), "--out: cannot write : the path is empty");
  // Root may write anywhere by the folder's bits, but not create files in
  // /proc: the probe finds it (before, the write failed after the job).
  EXPECT_THAT(why("/proc/lockstep-out"),
              ::testing::HasSubstr("--out: cannot write /proc/lockstep-out: no file can "
                        "be created in /proc ("));
  ReadOnlyFoldersEnv read_only;
  EXPECT_EQ(why(dir + "/new", &read_only),
            absl::StrCat("--out: cannot write ", dir, "/new: the folder ", dir,
                         " is not writable"));
}

}  // namespace
}  // namespace lockstep
