#include "deploy/launch/launcher.h"

#include <dirent.h>
#include <errno.h>
#include <fcntl.h>
#include <limits.h>
#include <signal.h>
#include <stdlib.h>
#include <string.h>
#include <sys/wait.h>
#include <unistd.h>

#include <algorithm>
#include <cstdio>
#include <cstdlib>
#include <cstring>
#include <fstream>
#include <memory>
#include <optional>
#include <sstream>
#include <utility>
#include <vector>

#include "absl/strings/ascii.h"
#include "absl/strings/match.h"
#include "absl/strings/numbers.h"
#include "absl/strings/str_cat.h"
#include "absl/strings/str_join.h"
#include "absl/strings/str_split.h"
#include "absl/strings/strip.h"
#include "common/formats/json_writer.h"
#include "common/optim/sum_order.h"
#include "deploy/launch/remote_spawn.h"

namespace lockstep {
namespace {

// How often the startup loop looks for port files: nothing signals a file
// appearing to poll(), and a server takes far longer than this to start.
constexpr absl::Duration kPortFileRecheck = absl::Milliseconds(20);

// What deploy/tls/make_certs.sh writes.
constexpr const char* kTlsFiles[] = {"ca.pem", "server.pem", "server.key",
                                     "worker.pem", "worker.key"};

// A mkdtemp() directory for the port files, removed with its contents by the
// destructor. Thread-compatible.
class TempDir final {
 public:
  static absl::StatusOr<std::unique_ptr<TempDir>> Create() {
    const char* tmp = getenv("TMPDIR");
    std::string pattern =
        absl::StrCat(tmp != nullptr && *tmp != '\0' ? tmp : "/tmp",
                     "/lockstep_launch.XXXXXX");
    if (mkdtemp(pattern.data()) == nullptr) {
      return absl::InternalError(
          absl::StrCat("cannot create a temporary directory ", pattern, ": ",
                       strerror(errno)));
    }
    return std::unique_ptr<TempDir>(new TempDir(std::move(pattern)));
  }

  ~TempDir() {
    // The servers may leave their pre-rename temporary files too.
    if (DIR* dir = opendir(path_.c_str())) {
      while (const dirent* entry = readdir(dir)) {
        const std::string name = entry->d_name;
        if (name != "." && name != "..") {
          unlink(absl::StrCat(path_, "/", name).c_str());
        }
      }
      closedir(dir);
    }
    rmdir(path_.c_str());
  }

  const std::string& path() const { return path_; }

 private:
  explicit TempDir(std::string path) : path_(std::move(path)) {}
  const std::string path_;
};

int ExitCodeFor(const ChildExit& exit) {
  if (WIFEXITED(exit.wait_status) && WEXITSTATUS(exit.wait_status) > 0) {
    return WEXITSTATUS(exit.wait_status);
  }
  return 1;
}

// Reports why a phase stopped early (an interrupt or a failed child; the
// caller has logged other reasons), stops every child, and returns the exit
// code.
int Abort(ProcessGroup& group, const RunResult& result, absl::Duration grace) {
  int code = 1;
  switch (result.reason) {
    case RunResult::Reason::kInterrupted:
      group.Log(absl::StrCat("received signal ", result.signal, " (",
                             strsignal(result.signal),
                             "); stopping all processes"));
      code = 128 + result.signal;
      break;
    case RunResult::Reason::kChildFailed:
      group.Log(absl::StrCat(result.failure.name, " (pid ", result.failure.pid,
                             ") ", result.failure.Describe(),
                             "; stopping all processes"));
      code = ExitCodeFor(result.failure);
      break;
    default:
      break;
  }
  if (group.num_running() > 0) {
    group.Log(absl::StrCat("sending SIGTERM to ", group.num_running(),
                           " process(es); SIGKILL after ",
                           absl::FormatDuration(grace)));
  }
  group.Terminate(grace);
  return code;
}

}  // namespace

std::optional<InvalidLaunchOption> ValidateLaunchOptions(
    const LaunchOptions& options) {
  if (options.workers < 1) {
    return InvalidLaunchOption{"workers", "must be at least 1"};
  }
  if (options.ps < 1) return InvalidLaunchOption{"ps", "must be at least 1"};
  if (options.startup_timeout <= absl::ZeroDuration()) {
    return InvalidLaunchOption{"startup_timeout", "must be positive"};
  }
  if (options.grace_period < absl::ZeroDuration()) {
    return InvalidLaunchOption{"grace_period", "must not be negative"};
  }
  if (absl::Status order = ParseSumOrder(options.sum_order).status();
      !order.ok()) {
    return InvalidLaunchOption{"sum_order", std::string(order.message())};
  }
  if (auto invalid = ValidatePerProcessOptions(options)) return invalid;
  if (!options.tls_dir.empty()) {
    for (const char* name : kTlsFiles) {
      const std::string path = absl::StrCat(options.tls_dir, "/", name);
      if (access(path.c_str(), R_OK) != 0) {
        return InvalidLaunchOption{"tls_dir",
                                   absl::StrCat("cannot read ", path,
                                                " (make the certificates with "
                                                "deploy/tls/make_certs.sh ",
                                                options.tls_dir, ")")};
      }
    }
  }
  return std::nullopt;
}

absl::StatusOr<std::string> ExecutableDir() {
  char buf[PATH_MAX];
  const ssize_t n = readlink("/proc/self/exe", buf, sizeof(buf) - 1);
  if (n <= 0) {
    return absl::InternalError(
        absl::StrCat("readlink /proc/self/exe: ", strerror(errno)));
  }
  std::string path(buf, static_cast<size_t>(n));
  const size_t slash = path.rfind('/');
  return slash == 0 ? "/" : path.substr(0, slash);
}

absl::StatusOr<int> ReadPortFile(const std::string& path) {
  // Judge by open()'s own errno: checking existence separately races with
  // the server's rename, which can land in between.
  const int fd = open(path.c_str(), O_RDONLY | O_CLOEXEC);
  if (fd < 0) {
    if (errno == ENOENT) {
      return absl::NotFoundError(absl::StrCat(path, " does not exist yet"));
    }
    return absl::InternalError(
        absl::StrCat("cannot read ", path, ": ", strerror(errno)));
  }
  close(fd);
  std::ifstream in(path);
  if (!in) {
    return absl::NotFoundError(absl::StrCat(path, " vanished while read"));
  }
  std::stringstream text;
  text << in.rdbuf();
  int port = 0;
  if (!absl::SimpleAtoi(absl::StripAsciiWhitespace(text.str()), &port) ||
      port < 1 || port > 65535) {
    return absl::DataLossError(
        absl::StrCat(path, " does not hold a port number: \"",
                     absl::StripAsciiWhitespace(text.str()), "\""));
  }
  return port;
}

namespace {

// The servers the launcher started: their pids, port files and, once
// written, ports (0 before).
struct Servers {
  std::vector<pid_t> pids;
  std::vector<std::string> port_files;
  std::vector<int> ports;
};

// Starts every shard with its port file in `dir`; the exit code when one
// cannot be started.
std::optional<int> StartServers(const LaunchOptions& options,
                                const std::string& dir, ProcessGroup& group,
                                Servers* servers) {
  for (int i = 0; i < options.ps; ++i) {
    servers->port_files.push_back(absl::StrCat(dir, "/ps", i, ".port"));
    absl::StatusOr<pid_t> pid =
        StartOnHost(group, options.hosts, options.hosts.ServerHost(i),
                    absl::StrCat("ps", i),
                    ServerArgv(options, i, servers->port_files.back()));
    if (!pid.ok()) {
      group.Log(pid.status().message());
      return Abort(group, RunResult(), options.grace_period);
    }
    servers->pids.push_back(*pid);
  }
  servers->ports.assign(options.ps, 0);
  return std::nullopt;
}

// Logs how the first server without a port, shard `i`, exited.
void LogServerGoneBeforePort(const Servers& servers, size_t i,
                             ProcessGroup& group) {
  for (const ChildExit& exit : group.exits()) {
    if (exit.pid != servers.pids[i]) continue;
    group.Log(absl::StrCat(exit.name, " (pid ", exit.pid, ") ", exit.Describe(),
                           " before it wrote its port file"));
  }
}

// Waits (options.startup_timeout) until every server has written its
// port; the exit code when one fails or does not in time.
std::optional<int> WaitForPorts(const LaunchOptions& options,
                                ProcessGroup& group, Servers* servers) {
  std::vector<int>& ports = servers->ports;
  absl::Status port_error;
  auto listening_or_gone = [&] {
    bool all = true;
    for (int i = 0; i < options.ps; ++i) {
      if (ports[i] != 0) continue;
      if (!group.IsRunning(servers->pids[i])) return true;
      absl::StatusOr<int> port =
          ServerPort(options.hosts, i, servers->port_files[i]);
      if (port.ok()) {
        ports[i] = *port;
      } else if (absl::IsNotFound(port.status())) {
        all = false;
      } else {
        port_error = port.status();
        return true;
      }
    }
    return all;
  };
  RunOptions startup;
  startup.deadline = absl::Now() + options.startup_timeout;
  startup.recheck_interval = kPortFileRecheck;
  RunResult result = group.Run(listening_or_gone, startup);
  if (result.reason == RunResult::Reason::kDeadline ||
      result.reason == RunResult::Reason::kNoneRunning) {
    std::vector<std::string> waiting;
    for (int i = 0; i < options.ps; ++i) {
      if (ports[i] == 0) waiting.push_back(absl::StrCat("ps", i));
    }
    group.Log(absl::StrCat(NotListeningYet(options.hosts),
                           absl::StrJoin(waiting, ", "),
                           " within the startup timeout of ",
                           absl::FormatDuration(options.startup_timeout)));
    return Abort(group, result, options.grace_period);
  }
  if (result.reason != RunResult::Reason::kDone) {
    return Abort(group, result, options.grace_period);
  }
  if (!port_error.ok()) {
    group.Log(port_error.message());
    return Abort(group, result, options.grace_period);
  }
  if (auto gone = std::find(ports.begin(), ports.end(), 0);
      gone != ports.end()) {
    LogServerGoneBeforePort(*servers, gone - ports.begin(), group);
    return Abort(group, result, options.grace_period);
  }
  return std::nullopt;
}

// Starts every worker against `addresses`; the exit code when one cannot
// be started.
std::optional<int> StartWorkers(const LaunchOptions& options,
                                const std::vector<std::string>& addresses,
                                ProcessGroup& group,
                                std::vector<pid_t>* workers) {
  const std::string server_list = absl::StrJoin(addresses, ",");
  const std::string python_dir = PythonDir(options);
  for (int rank = 0; rank < options.workers; ++rank) {
    const std::string name = absl::StrCat("worker", rank);
    const std::string& host = options.hosts.WorkerHost(rank);
    std::vector<std::string> env;
    if (!options.command.empty()) {
      env = WorkerEnv(options, rank, addresses, python_dir,
                      std::getenv("PYTHONPATH"));
      // Another host's PATH is its own.
      if (host.empty()) {
        env.push_back(PathWithBinDir(options.bin_dir, std::getenv("PATH")));
      }
    }
    absl::StatusOr<pid_t> pid =
        StartOnHost(group, options.hosts, host, name,
                    WorkerArgv(options, rank, server_list), env);
    if (!pid.ok()) {
      group.Log(pid.status().message());
      return Abort(group, RunResult(), options.grace_period);
    }
    workers->push_back(*pid);
    group.Log(absl::StrCat(
        name, ": pid ", *pid, HostNote(options.hosts.WorkerHost(rank)),
        ", servers ", server_list,
        options.gpus > 0 ? absl::StrCat(", GPU ", rank % options.gpus)
                         : std::string(", device chosen by the worker")));
  }
  return std::nullopt;
}

// Waits for the workers to finish, then gives the servers the grace
// period to exit by themselves; returns the launcher's exit code.
int WaitForJobEnd(const LaunchOptions& options,
                  const std::vector<pid_t>& workers,
                  const std::vector<pid_t>& servers, ProcessGroup& group) {
  auto none_running = [&group](const std::vector<pid_t>& pids) {
    for (pid_t pid : pids) {
      if (group.IsRunning(pid)) return false;
    }
    return true;
  };
  RunResult result =
      group.Run([&] { return none_running(workers); }, RunOptions());
  if (result.reason != RunResult::Reason::kDone) {
    return Abort(group, result, options.grace_period);
  }
  group.Log(absl::StrCat("all ", options.workers, " workers finished"));

  // Servers run with --exit_when_done; give them the grace period to do so.
  RunOptions shutdown;
  shutdown.deadline = absl::Now() + options.grace_period;
  result = group.Run([&] { return none_running(servers); }, shutdown);
  if (result.reason == RunResult::Reason::kChildFailed ||
      result.reason == RunResult::Reason::kInterrupted) {
    return Abort(group, result, options.grace_period);
  }
  if (group.num_running() > 0) {
    group.Log(absl::StrCat(group.num_running(), " server(s) still running ",
                           absl::FormatDuration(options.grace_period),
                           " after the workers finished; sending SIGTERM"));
    group.Terminate(options.grace_period);
  }
  return 0;
}

}  // namespace

int Launch(const LaunchOptions& options,
           const ProcessGroupOptions& group_options) {
  // Declared before the group, so the children are gone before it is removed.
  absl::StatusOr<std::unique_ptr<TempDir>> dir = TempDir::Create();
  ProcessGroup group(group_options);
  if (!dir.ok()) {
    group.Log(dir.status().message());
    return 1;
  }
  // Servers first: workers need their addresses.
  Servers servers;
  if (std::optional<int> code =
          StartServers(options, (*dir)->path(), group, &servers)) {
    return *code;
  }
  if (std::optional<int> code = WaitForPorts(options, group, &servers)) {
    return *code;
  }
  std::vector<std::string> addresses;
  for (int i = 0; i < options.ps; ++i) {
    addresses.push_back(ServerAddress(options.hosts, i, servers.ports[i]));
    group.Log(absl::StrCat("ps", i, ": pid ", servers.pids[i],
                           ", listening on ", addresses.back()));
  }
  LogHowToReachTheJob(options, addresses, group);
  std::vector<pid_t> workers;
  if (std::optional<int> code =
          StartWorkers(options, addresses, group, &workers)) {
    return *code;
  }
  return WaitForJobEnd(options, workers, servers.pids, group);
}

}  // namespace lockstep
