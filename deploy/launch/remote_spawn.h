// Starting a job's process on another host over ssh: the ssh command line
// with a small remote wrapper that really stops the process when the
// launcher goes away, and the check that a remote server accepts
// connections.
//
// The wrapper (a POSIX sh script given to `sh -c` on the host) changes to
// the launcher's folder, starts the program in a session of its own
// (setsid, where the host has it), and waits for it, exiting with its exit
// code, which ssh passes on. Meanwhile it reads its stdin, which ssh
// connects to a pipe the launcher holds open: at end of file, which comes
// when the launcher closes that pipe to stop the process or when ssh or the
// launcher dies, it sends SIGTERM to the program's process group, and
// SIGKILL if it is still running after the grace period. So no process is
// left behind on a host whatever ends the launch, and no pseudo-terminal is
// needed (its "\r\n" line ends would reach the output).
#ifndef LOCKSTEP_DEPLOY_LAUNCH_REMOTE_SPAWN_H_
#define LOCKSTEP_DEPLOY_LAUNCH_REMOTE_SPAWN_H_

#include <sys/types.h>

#include <string>
#include <vector>

#include "absl/status/statusor.h"
#include "absl/strings/string_view.h"
#include "absl/time/time.h"
#include "deploy/launch/host_list.h"
#include "deploy/launch/process_group.h"

namespace lockstep {

// `s` quoted for a POSIX shell: in single quotes, each ' written '\''.
std::string ShellQuote(absl::string_view s);

// The local command line that runs `argv` with `env` ("NAME=VALUE", set
// with env(1)) on `host` in plan.dir: ssh -o BatchMode=yes -T, then
// plan.ssh_args, the host, "--" and the wrapped, quoted command. `grace` is
// how long the wrapper waits between SIGTERM and SIGKILL.
std::vector<std::string> RemoteArgv(const HostPlan& plan,
                                    const std::string& host,
                                    const std::vector<std::string>& argv,
                                    const std::vector<std::string>& env,
                                    absl::Duration grace);

// Starts `argv` as `name` in `group`: here when `host` is empty, else on
// `host` over ssh (RemoteArgv, with plan.grace), with its stdin on a pipe
// that the group closes to stop it.
absl::StatusOr<pid_t> StartOnHost(ProcessGroup& group, const HostPlan& plan,
                                  const std::string& host,
                                  absl::string_view name,
                                  const std::vector<std::string>& argv,
                                  const std::vector<std::string>& env = {});

// Whether a TCP connection to `host`:`port` (a name or an address, IPv6 in
// brackets or not) is accepted within `timeout`; the connection is closed
// at once.
bool AcceptsConnections(const std::string& host, int port,
                        absl::Duration timeout);

// Shard `shard`'s port once it listens; NOT_FOUND while it does not yet.
// On this machine from its `port_file` (ReadPortFile); across hosts its
// fixed port, once a connection to it is accepted.
absl::StatusOr<int> ServerPort(const HostPlan& plan, int shard,
                               const std::string& port_file);

}  // namespace lockstep

#endif  // LOCKSTEP_DEPLOY_LAUNCH_REMOTE_SPAWN_H_
