// Starting one child process for ProcessGroup: the program found in PATH,
// the launcher's environment with overrides on top, and fork/exec with the
// child's stdout and stderr on a pipe, the child's signals back at their
// defaults, and an exec failure reported to the parent before it returns.
#ifndef LOCKSTEP_DEPLOY_LAUNCH_SPAWN_H_
#define LOCKSTEP_DEPLOY_LAUNCH_SPAWN_H_

#include <sys/types.h>

#include <string>
#include <vector>

#include "absl/status/statusor.h"
#include "absl/strings/string_view.h"

namespace lockstep {

// A started child: its pid, the non-blocking read end of the pipe that
// holds its stdout and stderr, and, when asked for, the write end of the
// pipe that is its stdin (else -1: it shares the launcher's). The caller
// closes them.
struct SpawnedChild {
  pid_t pid = -1;
  int out_fd = -1;
  int in_fd = -1;
};

// Starts argv (argv[0] a path, or a name looked up in PATH) with
// `env` ("NAME=VALUE") set on top of this process's environment; the child
// is killed when the launcher dies. With `stdin_pipe` its stdin is a pipe
// (SpawnedChild::in_fd), which no other child inherits, and it runs in a
// process group of its own, so that a terminal's Ctrl-C reaches it only
// through the launcher. `name` appears in
// errors. Fails, with nothing left running, when the program cannot be
// found or executed.
absl::StatusOr<SpawnedChild> SpawnChild(absl::string_view name,
                                        const std::vector<std::string>& argv,
                                        const std::vector<std::string>& env,
                                        bool stdin_pipe = false);

}  // namespace lockstep

#endif  // LOCKSTEP_DEPLOY_LAUNCH_SPAWN_H_
