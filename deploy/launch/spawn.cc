#include "deploy/launch/spawn.h"

#include <errno.h>
#include <fcntl.h>
#include <signal.h>
#include <stdlib.h>
#include <string.h>
#include <sys/prctl.h>
#include <sys/stat.h>
#include <sys/wait.h>
#include <unistd.h>

#include <algorithm>
#include <string>
#include <utility>
#include <vector>

#include "absl/status/status.h"
#include "absl/strings/match.h"
#include "absl/strings/str_cat.h"
#include "absl/strings/str_split.h"
#include "common/flags/env_flags.h"

namespace lockstep {
namespace {

absl::Status ErrnoError(absl::string_view what, int err) {
  return absl::InternalError(absl::StrCat(what, ": ", strerror(err)));
}

// `program` itself when it names a path (holds a '/'), else the first
// executable file of that name in the folders of the child's PATH (from
// `environment`, as a shell or env(1) would look it up); empty when there
// is none.
std::string ResolveProgram(const std::string& program,
                           const std::vector<std::string>& environment) {
  if (program.find('/') != std::string::npos) return program;
  absl::string_view path = "/usr/bin:/bin";
  for (const std::string& entry : environment) {
    if (absl::StartsWith(entry, "PATH="))
      path = absl::string_view(entry).substr(5);
  }
  for (absl::string_view dir : absl::StrSplit(path, ':')) {
    const std::string candidate =
        absl::StrCat(dir.empty() ? "." : dir, "/", program);
    struct stat st;
    if (stat(candidate.c_str(), &st) == 0 && S_ISREG(st.st_mode) &&
        access(candidate.c_str(), X_OK) == 0) {
      return candidate;
    }
  }
  return "";
}

// This process's environment with `overrides` ("NAME=VALUE") set on top,
// less the variables of one process's own ports (LOCKSTEP_METRICS_PORT and
// the like, common/flags/env_flags.h): every child would take the same.
std::vector<std::string> MergeEnvironment(
    const std::vector<std::string>& overrides) {
  auto name_of = [](absl::string_view entry) {
    return entry.substr(0, entry.find('='));
  };
  std::vector<std::string> dropped;
  for (absl::string_view flag : PerProcessEnvironmentFlags()) {
    dropped.push_back(EnvironmentVariableOf(flag));
  }
  std::vector<std::string> out;
  for (char** e = environ; e != nullptr && *e != nullptr; ++e) {
    const absl::string_view entry(*e);
    const bool replaced = std::any_of(
        overrides.begin(), overrides.end(),
        [&](const std::string& o) { return name_of(o) == name_of(entry); });
    const bool per_process = std::find(dropped.begin(), dropped.end(),
                                       name_of(entry)) != dropped.end();
    if (!replaced && !per_process) out.emplace_back(entry);
  }
  out.insert(out.end(), overrides.begin(), overrides.end());
  return out;
}

// Pointers to `strings`, null-terminated, as execve takes them.
std::vector<char*> CStrings(const std::vector<std::string>& strings) {
  std::vector<char*> out;
  for (const std::string& s : strings)
    out.push_back(const_cast<char*>(s.c_str()));
  out.push_back(nullptr);
  return out;
}

// The child's side of fork(): only async-signal-safe calls. `in_fd`, when
// not -1, becomes its stdin, and the child leads a process group of its
// own. Writes exec's errno to `exec_err_fd` if execve fails.
[[noreturn]] void ExecChild(pid_t parent, int in_fd, int out_fd,
                            int exec_err_fd, const char* path,
                            char* const* argv, char* const* env) {
  // If the launcher dies without cleaning up (SIGKILL), so does the child.
  prctl(PR_SET_PDEATHSIG, SIGKILL);
  if (getppid() != parent) _exit(127);  // The launcher died before prctl.
  // The launcher ignores SIGPIPE and may block signals; ignored and blocked
  // signals survive exec, so give the child the defaults back.
  struct sigaction dfl = {};
  dfl.sa_handler = SIG_DFL;
  sigaction(SIGPIPE, &dfl, nullptr);
  sigset_t none;
  sigemptyset(&none);
  sigprocmask(SIG_SETMASK, &none, nullptr);
  if (in_fd >= 0) {
    dup2(in_fd, STDIN_FILENO);
    setpgid(0, 0);  // Out of reach of the terminal's Ctrl-C.
  }
  dup2(out_fd, STDOUT_FILENO);
  dup2(out_fd, STDERR_FILENO);
  execve(path, argv, env);
  const int err = errno;
  ssize_t ignored = write(exec_err_fd, &err, sizeof(err));
  (void)ignored;
  _exit(127);
}

// The parent's side: waits for the exec (the error pipe closes) or its
// errno, in which case the child is reaped and the error returned.
absl::StatusOr<SpawnedChild> AwaitExec(absl::string_view name,
                                       const std::string& program, pid_t pid,
                                       int out_fd, int exec_err_fd) {
  int child_errno = 0;
  ssize_t n;
  do {
    n = read(exec_err_fd, &child_errno, sizeof(child_errno));
  } while (n < 0 && errno == EINTR);
  close(exec_err_fd);
  if (n == static_cast<ssize_t>(sizeof(child_errno))) {
    close(out_fd);
    int status;
    while (waitpid(pid, &status, 0) < 0 && errno == EINTR) {
    }
    return absl::FailedPreconditionError(
        absl::StrCat("cannot execute ", program, " for ", name, ": ",
                     strerror(child_errno)));
  }
  fcntl(out_fd, F_SETFL, fcntl(out_fd, F_GETFL) | O_NONBLOCK);
  return SpawnedChild{pid, out_fd};
}

// The pipes of one child being started; closes whatever it still holds.
struct ChildPipes {
  int out[2] = {-1, -1};
  int exec_err[2] = {-1, -1};
  int in[2] = {-1, -1};

  ~ChildPipes() {
    for (int* pair : {out, exec_err, in}) {
      for (int i : {0, 1}) {
        if (pair[i] >= 0) close(pair[i]);
      }
    }
  }

  absl::Status Open(bool stdin_pipe) {
    if (pipe2(out, O_CLOEXEC) != 0 || pipe2(exec_err, O_CLOEXEC) != 0 ||
        (stdin_pipe && pipe2(in, O_CLOEXEC) != 0)) {
      return ErrnoError("pipe2", errno);
    }
    return absl::OkStatus();
  }

  // Closes what only the child uses, after fork().
  void CloseChildEnds() {
    for (int* fd : {&out[1], &exec_err[1], &in[0]}) {
      if (*fd >= 0) close(*fd);
      *fd = -1;
    }
  }

  // Hands `fd` (one of the members) over to the caller.
  static int Release(int& fd) { return std::exchange(fd, -1); }
};

}  // namespace

absl::StatusOr<SpawnedChild> SpawnChild(absl::string_view name,
                                        const std::vector<std::string>& argv,
                                        const std::vector<std::string>& env,
                                        bool stdin_pipe) {
  if (argv.empty()) return absl::InvalidArgumentError("empty argv");
  // Everything the child needs is allocated before fork(): after it, only
  // async-signal-safe calls.
  const std::vector<std::string> environment = MergeEnvironment(env);
  const std::string path = ResolveProgram(argv[0], environment);
  if (path.empty()) {
    return absl::FailedPreconditionError(absl::StrCat(
        "cannot execute ", argv[0], " for ", name, ": not found in PATH"));
  }
  std::vector<char*> c_argv = CStrings(argv);
  std::vector<char*> c_env = CStrings(environment);

  // The output pipe; the exec error pipe, closed by a successful exec
  // (CLOEXEC), which carries errno if exec fails; the stdin pipe if asked.
  ChildPipes pipes;
  if (absl::Status status = pipes.Open(stdin_pipe); !status.ok()) {
    return status;
  }
  const pid_t parent = getpid();
  const pid_t pid = fork();
  if (pid < 0) return ErrnoError("fork", errno);
  if (pid == 0) {
    ExecChild(parent, pipes.in[0], pipes.out[1], pipes.exec_err[1],
              path.c_str(), c_argv.data(), c_env.data());
  }
  pipes.CloseChildEnds();
  absl::StatusOr<SpawnedChild> child =
      AwaitExec(name, argv[0], pid, pipes.Release(pipes.out[0]),
                pipes.Release(pipes.exec_err[0]));
  if (child.ok()) child->in_fd = pipes.Release(pipes.in[1]);
  return child;
}

}  // namespace lockstep
