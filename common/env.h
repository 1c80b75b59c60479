// The clock, the sleeps and the file operations of the server core, the
// barrier, checkpoints, the trainer and the push path, behind one
// interface (as leveldb's Env), so that a test can run them on a clock it
// moves itself instead of sleeping, and can pause or fail a file operation
// without a flag in the production binaries.
//
// Env::Default() is the real one: absl's clock and POSIX files. FakeEnv
// (below) is a manual clock over the real files.
//
// Thread-safe: every method may be called from any thread.
#ifndef LOCKSTEP_COMMON_ENV_H_
#define LOCKSTEP_COMMON_ENV_H_

#include <string>

#include "absl/base/thread_annotations.h"
#include "absl/status/status.h"
#include "absl/synchronization/mutex.h"
#include "absl/time/time.h"

namespace lockstep {

class Env {
 public:
  virtual ~Env() = default;

  // The process-wide real environment; never destroyed.
  static Env* Default();

  virtual absl::Time Now() = 0;
  // Blocks the caller for `duration` of this Env's time (no-op if <= 0).
  virtual void SleepFor(absl::Duration duration) = 0;

  // rename(2): moves `from` over `to` atomically within one file system.
  virtual absl::Status RenameFile(const std::string& from,
                                  const std::string& to);
};

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

#endif  // LOCKSTEP_COMMON_ENV_H_
