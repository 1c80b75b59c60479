// lockstep_server_testing: lockstep_server plus hooks that only tests need,
// so that the production binary carries none: pauses that hold a shard
// where a test wants to act (kill it while a checkpoint is half written,
// probe its health while it restores).
#include <string>

#include "absl/flags/flag.h"
#include "absl/time/time.h"
#include "server/daemon/server_main.h"

ABSL_FLAG(int, testing_checkpoint_pause_ms, 0,
          "Pause before renaming a checkpoint into place.");
ABSL_FLAG(int, testing_restore_pause_ms, 0,
          "Pause after reading the checkpoint to restore.");

int main(int argc, char** argv) {
  return lockstep::ServerMain(
      argc, argv, {"tests/fault/testing_server_main.cc"},
      [](lockstep::DaemonOptions* options) {
        options->checkpoint_pause_for_tests = absl::Milliseconds(
            absl::GetFlag(FLAGS_testing_checkpoint_pause_ms));
        options->restore_pause_for_tests =
            absl::Milliseconds(absl::GetFlag(FLAGS_testing_restore_pause_ms));
      });
}
