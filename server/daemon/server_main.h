// lockstep_server's command line: its flags (server_main.cc, with their
// help text), their translation into DaemonOptions, signal handling, and
// the run of one shard. main.cc calls it; a test binary may add flags of
// its own and adjust the options before the daemon starts.
#ifndef LOCKSTEP_SERVER_DAEMON_SERVER_MAIN_H_
#define LOCKSTEP_SERVER_DAEMON_SERVER_MAIN_H_

#include <functional>
#include <string>
#include <vector>

#include "server/daemon/daemon.h"

namespace lockstep {

// Parses the flags (exit 2 on a bad one), runs the shard until it is done
// or stopped, and returns the process's exit code. `help_files` adds the
// source files whose flags --help lists; `adjust`, when set, sees the
// options last.
int ServerMain(int argc, char** argv, std::vector<std::string> help_files,
               const std::function<void(DaemonOptions*)>& adjust);

}  // namespace lockstep

#endif  // LOCKSTEP_SERVER_DAEMON_SERVER_MAIN_H_
