#include "deploy/launch/remote_spawn.h"

#include <errno.h>
#include <fcntl.h>
#include <netdb.h>
#include <poll.h>
#include <sys/socket.h>
#include <unistd.h>

#include <cmath>
#include <cstdint>
#include <string>
#include <vector>

#include "absl/status/status.h"
#include "absl/strings/str_cat.h"
#include "absl/strings/str_join.h"
#include "absl/strings/strip.h"
#include "deploy/launch/launcher.h"

namespace lockstep {
namespace {

// The remote wrapper (remote_spawn.h): $1 the folder, $2 the grace period
// in tenths of a second, the rest the command. Fd 3 keeps ssh's stdin for
// the watcher; the program gets /dev/null.
constexpr char kWrapper[] = R"(d=$1 g=$2; shift 2
cd "$d" || exit 2
exec 3<&0 </dev/null
if command -v setsid >/dev/null 2>&1; then setsid "$@" 3<&- &
else "$@" 3<&- &
fi
p=$!
{ while read -r _; do :; done
  kill -s TERM -- -"$p" 2>/dev/null || kill -s TERM "$p"
  i=0
  while kill -0 "$p" 2>/dev/null && [ "$i" -lt "$g" ]; do
    sleep 0.1; i=$((i + 1))
  done
  kill -s KILL -- -"$p" 2>/dev/null || kill -s KILL "$p"
} <&3 >/dev/null 2>&1 &
w=$!
exec 3<&-
wait "$p"
rc=$?
kill "$w" 2>/dev/null
exit "$rc")";

// How long one connection attempt to a remote server may take.
constexpr absl::Duration kProbeTimeout = absl::Milliseconds(200);

// Whether the non-blocking connect on `fd` completes within `timeout`.
bool ConnectCompletes(int fd, const addrinfo& address, absl::Duration timeout) {
  if (connect(fd, address.ai_addr, address.ai_addrlen) == 0) return true;
  if (errno != EINPROGRESS) return false;
  pollfd pfd = {fd, POLLOUT, 0};
  if (poll(&pfd, 1, static_cast<int>(absl::ToInt64Milliseconds(timeout))) !=
      1) {
    return false;
  }
  int error = 0;
  socklen_t length = sizeof(error);
  return getsockopt(fd, SOL_SOCKET, SO_ERROR, &error, &length) == 0 &&
         error == 0;
}

}  // namespace

std::string ShellQuote(absl::string_view s) {
  std::string out = "'";
  for (const char c : s) {
    if (c == '\'') {
      out += "'\\''";
    } else {
      out += c;
    }
  }
  out += "'";
  return out;
}

std::vector<std::string> RemoteArgv(const HostPlan& plan,
                                    const std::string& host,
                                    const std::vector<std::string>& argv,
                                    const std::vector<std::string>& env,
                                    absl::Duration grace) {
  std::vector<std::string> words = {
      "exec",
      "sh",
      "-c",
      ShellQuote(kWrapper),
      "lockstep-remote",
      ShellQuote(plan.dir),
      absl::StrCat(static_cast<int64_t>(
          std::ceil(absl::FDivDuration(grace, absl::Milliseconds(100)))))};
  if (!env.empty()) words.push_back("env");
  for (const std::string& entry : env) words.push_back(ShellQuote(entry));
  for (const std::string& arg : argv) words.push_back(ShellQuote(arg));

  std::vector<std::string> out = {"ssh", "-o", "BatchMode=yes", "-T"};
  out.insert(out.end(), plan.ssh_args.begin(), plan.ssh_args.end());
  out.push_back(host);
  out.push_back("--");
  out.push_back(absl::StrJoin(words, " "));
  return out;
}

absl::StatusOr<pid_t> StartOnHost(ProcessGroup& group, const HostPlan& plan,
                                  const std::string& host,
                                  absl::string_view name,
                                  const std::vector<std::string>& argv,
                                  const std::vector<std::string>& env) {
  if (host.empty()) return group.Start(name, argv, env);
  return group.Start(name, RemoteArgv(plan, host, argv, env, plan.grace), {},
                     /*stop_by_closing_stdin=*/true);
}

bool AcceptsConnections(const std::string& host, int port,
                        absl::Duration timeout) {
  absl::string_view name = host;
  if (absl::ConsumePrefix(&name, "[")) absl::ConsumeSuffix(&name, "]");
  addrinfo hints = {};
  hints.ai_family = AF_UNSPEC;
  hints.ai_socktype = SOCK_STREAM;
  hints.ai_flags = AI_NUMERICSERV;
  addrinfo* addresses = nullptr;
  if (getaddrinfo(std::string(name).c_str(), absl::StrCat(port).c_str(), &hints,
                  &addresses) != 0) {
    return false;
  }
  bool accepted = false;
  for (addrinfo* a = addresses; a != nullptr && !accepted; a = a->ai_next) {
    const int fd =
        socket(a->ai_family, a->ai_socktype | SOCK_NONBLOCK | SOCK_CLOEXEC,
               a->ai_protocol);
    if (fd < 0) continue;
    accepted = ConnectCompletes(fd, *a, timeout);
    close(fd);
  }
  freeaddrinfo(addresses);
  return accepted;
}

absl::StatusOr<int> ServerPort(const HostPlan& plan, int shard,
                               const std::string& port_file) {
  if (!plan.active()) return ReadPortFile(port_file);
  const int port = plan.server_port + shard;
  if (!AcceptsConnections(HostAddress(plan.server_hosts[shard]), port,
                          kProbeTimeout)) {
    return absl::NotFoundError(absl::StrCat("ps", shard, " is not listening"));
  }
  return port;
}

}  // namespace lockstep
