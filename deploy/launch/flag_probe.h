// Asks lockstep_server and lockstep_worker about flags before a job starts:
// the flags each takes (its --list_flags table), and whether the command
// lines the launcher built are valid (--validate_only), so that a bad flag
// fails once, before any process of the job runs.
#ifndef LOCKSTEP_DEPLOY_LAUNCH_FLAG_PROBE_H_
#define LOCKSTEP_DEPLOY_LAUNCH_FLAG_PROBE_H_

#include <string>
#include <vector>

#include "absl/status/status.h"
#include "absl/status/statusor.h"
#include "absl/time/time.h"
#include "deploy/launch/flag_routing.h"

namespace lockstep {

// How a program run to its end went: its exit code (128 + N for signal N)
// and everything it wrote to stdout and stderr.
struct ProgramRun {
  int exit_code = -1;
  std::string output;
};

// Runs `argv` (argv[0] a path) to its end; DEADLINE_EXCEEDED, with the
// program killed, when it runs past `timeout`.
absl::StatusOr<ProgramRun> RunToEnd(const std::vector<std::string>& argv,
                                    absl::Duration timeout);

// The flags of the Lockstep binary at `path`, from `path --list_flags`.
absl::StatusOr<FlagTable> ListFlags(const std::string& path);

// OK when `argv` is a valid command line for its program (argv plus
// --validate_only exits 0); otherwise INVALID_ARGUMENT with what the
// program wrote.
absl::Status ValidateCommandLine(const std::vector<std::string>& argv);

}  // namespace lockstep

#endif  // LOCKSTEP_DEPLOY_LAUNCH_FLAG_PROBE_H_
