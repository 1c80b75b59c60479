// The clock, the sleeps and the file operations of the server core, the
// barrier, checkpoints, weights and summary files, the trainer and the push
// path, behind one interface (as leveldb's Env), so that a test can run
// them on a clock it moves itself instead of sleeping, and can pause, tear
// or fail a file operation (tests/unit/fault_injection_env.h) without a
// flag in the production binaries.
//
// Env::Default() is the real one: absl's clock and POSIX files. The file
// operations of the base class are the POSIX ones, so an Env that only
// overrides the clock (FakeEnv below) or one call still has real files.
//
// Thread-safe: every method may be called from any thread.
#ifndef LOCKSTEP_COMMON_BASE_ENV_H_
#define LOCKSTEP_COMMON_BASE_ENV_H_

#include <cstdint>
#include <memory>
#include <string>
#include <vector>

#include "absl/base/thread_annotations.h"
#include "absl/status/status.h"
#include "absl/status/statusor.h"
#include "absl/strings/string_view.h"
#include "absl/synchronization/mutex.h"
#include "absl/time/time.h"

namespace lockstep {

// A file open for writing from its start, as leveldb's WritableFile. The
// destructor closes it if Close() was not called (ignoring the result).
// Externally synchronized: one writer at a time.
class WritableFile {
 public:
  virtual ~WritableFile() = default;

  // write(2) of all of `data` after what is already written. On failure
  // some prefix of `data` may be in the file.
  virtual absl::Status Append(absl::string_view data) = 0;
  // fsync(2): what was appended survives a crash once this returns OK.
  virtual absl::Status Sync() = 0;
  // close(2); no call may follow.
  virtual absl::Status Close() = 0;
};

// What Env::Stat tells about a path.
struct FileInfo {
  bool is_directory = false;
  // This process may write the file, or create files in the directory.
  bool writable = false;
  int64_t size = 0;
  absl::Time modified;
};

// The one conversion of an errno into a status: NOT_FOUND for ENOENT,
// RESOURCE_EXHAUSTED for ENOSPC and EDQUOT (the disk is full), UNAVAILABLE
// otherwise; the message is "WHAT PATH: strerror". Fault-injecting Envs
// use it too, so an injected failure reads as a real one.
absl::Status FileError(absl::string_view what, absl::string_view path,
                       int error_number);

class Env {
 public:
  virtual ~Env() = default;

  // The process-wide real environment; never destroyed.
  static Env* Default();

  virtual absl::Time Now() = 0;
  // Blocks the caller for `duration` of this Env's time (no-op if <= 0).
  virtual void SleepFor(absl::Duration duration) = 0;

  // Every file operation below fails with FileError (naming the path and
  // the cause) and is the POSIX call it names.

  // open(2) with O_CREAT | O_TRUNC: an empty file at `path`, for writing.
  virtual absl::StatusOr<std::unique_ptr<WritableFile>> NewWritableFile(
      const std::string& path);
  // The whole file.
  virtual absl::StatusOr<std::string> ReadFile(const std::string& path);
  // rename(2): moves `from` over `to` atomically within one file system.
  virtual absl::Status RenameFile(const std::string& from,
                                  const std::string& to);
  // unlink(2).
  virtual absl::Status RemoveFile(const std::string& path);
  // fsync(2) of a directory: the entries created, renamed or removed in it
  // survive a crash once this returns OK.
  virtual absl::Status SyncDir(const std::string& dir);
  // The names in `dir` (not "." or ".."), in no particular order.
  virtual absl::StatusOr<std::vector<std::string>> GetChildren(
      const std::string& dir);
  // mkdir(2) of `dir` and of each missing parent (as mkdir -p).
  virtual absl::Status CreateDirs(const std::string& dir);
  // stat(2) and access(2).
  virtual absl::StatusOr<FileInfo> Stat(const std::string& path);
};

// The folder `path` is in: "." for a bare name, "/" for a name under it.
std::string DirName(absl::string_view path);

// Writes `contents` to `path` through `env` so that `path` is never half
// written, even across a crash: into PATH.<pid>-<n>.tmp (a name of this
// write alone, so that writers of one path at once all succeed), fsync,
// rename over `path`, fsync of its folder. When a step before the rename
// fails, the temporary file is removed and `path` is as it was; when the
// folder's fsync fails, `path` is whole but may revert in a crash.
// UNAVAILABLE "cannot write PATH: " and the failed operation's error.
absl::Status WriteFileAtomically(const std::string& path,
                                 absl::string_view contents,
                                 Env* env = Env::Default());

// Whether WriteFileAtomically could write `path` now, found without
// opening or truncating `path` (a check at start, so that an output that
// cannot be written fails before the work, not after it): its folder
// exists, is a directory, and this process may create files in it (Stat's
// `writable`, then an empty probe file "PATH.probe-PID" created and
// removed at once, as the write's temporary file will be: root may pass
// the first and still be refused, in /proc or /sys); `path` itself is not
// a directory. Otherwise
// FAILED_PRECONDITION "LABEL: cannot write PATH: WHY", where `label` names
// what asked for the file (a flag: "--dump_weights"). A check, not a
// promise: the folder may change before the write.
absl::Status CheckCanWriteFile(absl::string_view label, const std::string& path,
                               Env* env = Env::Default());

// A clock that stands still until a test moves it: Now() starts at
// `start`; Advance() moves it forward; SleepFor(d) moves it forward by d at
// once (a sleeper never waits), so code that polls with sleeps runs its
// whole schedule instantly and deterministically. Files are the real ones.
class FakeEnv : public Env {
 public:
  explicit FakeEnv(absl::Time start = absl::FromUnixSeconds(1'000'000'000))
      : now_(start) {}

  absl::Time Now() override;
  void SleepFor(absl::Duration duration) override;
  void Advance(absl::Duration duration);
  // The total of every SleepFor so far: what the code would have slept.
  absl::Duration slept();

 private:
  absl::Mutex mu_;
  absl::Time now_ ABSL_GUARDED_BY(mu_);
  absl::Duration slept_ ABSL_GUARDED_BY(mu_);
};

}  // namespace lockstep

#endif  // LOCKSTEP_COMMON_BASE_ENV_H_
