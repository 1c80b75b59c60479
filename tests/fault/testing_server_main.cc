// lockstep_server_testing: lockstep_server plus hooks that only tests need,
// so that the production binary carries none: pauses that hold a shard
// where a test wants to act (kill it while a checkpoint is half written,
// probe its health while it restores). They are an Env given to the
// shard's checkpoint store.
#include <atomic>
#include <string>

#include "absl/flags/flag.h"
#include "absl/status/status.h"
#include "absl/time/time.h"
#include "common/base/env.h"
#include "server/daemon/server_main.h"

ABSL_FLAG(int, testing_checkpoint_pause_ms, 0,
          "Pause before renaming a checkpoint into place.");
ABSL_FLAG(int, testing_restore_pause_ms, 0,
          "Pause as the checkpoint store starts loading the checkpoint to "
          "restore.");

namespace lockstep {
namespace {

// The real Env, with a pause before every rename and one before the
// store's first look at the clock: the start of the load of the newest
// checkpoint, which the daemon does before anything else with its store.
class PausingEnv final : public Env {
 public:
  PausingEnv(absl::Duration before_rename, absl::Duration before_load)
      : before_rename_(before_rename), before_load_(before_load) {}

  absl::Time Now() override {
    if (!loading_started_.exchange(true)) real_->SleepFor(before_load_);
    return real_->Now();
  }
  void SleepFor(absl::Duration duration) override { real_->SleepFor(duration); }
  absl::Status RenameFile(const std::string& from,
                          const std::string& to) override {
    real_->SleepFor(before_rename_);
    return real_->RenameFile(from, to);
  }

 private:
  Env* const real_ = Env::Default();
  const absl::Duration before_rename_;
  const absl::Duration before_load_;
  std::atomic<bool> loading_started_{false};
};

}  // namespace
}  // namespace lockstep

int main(int argc, char** argv) {
  return lockstep::ServerMain(
      argc, argv, {"tests/fault/testing_server_main.cc"},
      [](lockstep::DaemonOptions* options) {
        // Lives as long as the process: the daemon runs inside ServerMain.
        static lockstep::PausingEnv* const env = new lockstep::PausingEnv(
            absl::Milliseconds(
                absl::GetFlag(FLAGS_testing_checkpoint_pause_ms)),
            absl::Milliseconds(absl::GetFlag(FLAGS_testing_restore_pause_ms)));
        options->checkpoint_env = env;
      });
}
