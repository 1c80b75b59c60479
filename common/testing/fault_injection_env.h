// FaultInjectionEnv: an Env over another whose file operations fail the
// ways a disk does, on a test's word, and which can simulate a power cut
// (as leveldb's FaultInjectionTestEnv in db/fault_injection_test.cc). For
// tests only; no production binary links it.
//
//   FakeEnv clock;
//   FaultInjectionEnv env(&clock);  // Real files, the fake clock.
//   auto store = CheckpointStore::Create(dir, 0, 1, 2, &env);
//   env.FillDiskAfter(100);          // ENOSPC after 100 more bytes.
//   EXPECT_FALSE((*store)->Save(checkpoint).ok());
//   env.Heal();
//
// An injected failure is the status the real call would give for that
// errno (FileError), so the code under test cannot tell it from a real
// one. Faults hold until Heal().
//
// Thread-safe.
#ifndef LOCKSTEP_COMMON_TESTING_FAULT_INJECTION_ENV_H_
#define LOCKSTEP_COMMON_TESTING_FAULT_INJECTION_ENV_H_

#include <cstdint>
#include <map>
#include <memory>
#include <optional>
#include <string>
#include <vector>

#include "absl/base/thread_annotations.h"
#include "absl/status/status.h"
#include "absl/status/statusor.h"
#include "absl/synchronization/mutex.h"
#include "absl/time/time.h"
#include "common/base/env.h"

namespace lockstep {

class FaultInjectionEnv final : public Env {
 public:
  // `base` (not owned) does the real work and keeps the time.
  explicit FaultInjectionEnv(Env* base) : base_(base) {}

  absl::Time Now() override { return base_->Now(); }
  void SleepFor(absl::Duration duration) override { base_->SleepFor(duration); }

  // A torn write: every file keeps only its first `bytes`; the Append that
  // would go past them writes up to there and fails with EIO.
  void TearWritesAfter(int64_t bytes);
  // A full disk: `bytes` more fit, across all files; the Append that would
  // go past writes what fits and fails with ENOSPC.
  void FillDiskAfter(int64_t bytes);
  // WritableFile::Sync fails with EIO.
  void FailFileSyncs();
  // WritableFile::Sync says OK and makes nothing durable (a disk cache that
  // lies): SimulateCrash drops what was written.
  void LoseFileSyncs();
  // SyncDir fails with EIO.
  void FailDirSyncs();
  // RenameFile fails with EIO and moves nothing.
  void FailRenames();
  // ReadFile fails with EIO.
  void FailReads();
  // Ends every fault above.
  void Heal();
  // How many operations failed (or lied) because of a fault so far.
  int64_t faults_injected();

  // A power cut, after which the test goes on as a restarted process
  // would: each file written through this Env keeps only what was synced,
  // and each rename whose folder was not synced after it is undone (newest
  // first), the file it replaced coming back. Removals are not undone.
  absl::Status SimulateCrash();

  absl::StatusOr<std::unique_ptr<WritableFile>> NewWritableFile(
      const std::string& path) override;
  absl::StatusOr<std::string> ReadFile(const std::string& path) override;
  absl::Status RenameFile(const std::string& from,
                          const std::string& to) override;
  absl::Status RemoveFile(const std::string& path) override;
  absl::Status SyncDir(const std::string& dir) override;
  absl::StatusOr<std::vector<std::string>> GetChildren(
      const std::string& dir) override;
  absl::Status CreateDirs(const std::string& dir) override;
  absl::StatusOr<FileInfo> Stat(const std::string& path) override;

 private:
  class File;

  // What a file written through this Env holds, and how much of it a
  // crash would leave.
  struct Written {
    int64_t size = 0;
    int64_t synced = 0;
  };
  // A rename a crash would undo: what `to` held before, if anything.
  struct PendingRename {
    std::string from;
    std::string to;
    std::optional<std::string> replaced;
  };

  // For File: how many of `n` bytes at the end of `path` may be written,
  // and the errno that stops the rest (0: none).
  int64_t Admit(const std::string& path, int64_t n, int* error);
  absl::Status SyncFile(const std::string& path, WritableFile* file);
  // Rewrites `path` as `bytes` through base_ (synced).
  absl::Status Restore(const std::string& path, const std::string& bytes)
      ABSL_EXCLUSIVE_LOCKS_REQUIRED(mu_);

  Env* const base_;  // Not owned.
  absl::Mutex mu_;
  int64_t tear_after_ ABSL_GUARDED_BY(mu_) = -1;  // -1: no fault.
  int64_t space_left_ ABSL_GUARDED_BY(mu_) = -1;
  bool fail_file_syncs_ ABSL_GUARDED_BY(mu_) = false;
  bool lose_file_syncs_ ABSL_GUARDED_BY(mu_) = false;
  bool fail_dir_syncs_ ABSL_GUARDED_BY(mu_) = false;
  bool fail_renames_ ABSL_GUARDED_BY(mu_) = false;
  bool fail_reads_ ABSL_GUARDED_BY(mu_) = false;
  int64_t faults_injected_ ABSL_GUARDED_BY(mu_) = 0;
  std::map<std::string, Written> written_ ABSL_GUARDED_BY(mu_);
  std::vector<PendingRename> pending_renames_ ABSL_GUARDED_BY(mu_);
};

}  // namespace lockstep

#endif  // LOCKSTEP_COMMON_TESTING_FAULT_INJECTION_ENV_H_
