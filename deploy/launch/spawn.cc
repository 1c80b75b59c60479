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
#include <vector>

#include "absl/status/status.h"
#include "absl/strings/str_cat.h"
#include "absl/strings/str_split.h"

namespace lockstep {
namespace {

absl::Status ErrnoError(absl::string_view what, int err) {
  return absl::InternalError(absl::StrCat(what, ": ", strerror(err)));
}

// `program` itself when it names a path (holds a '/'), else the first
// executable file of that name in PATH's folders; empty when there is none.
std::string ResolveProgram(const std::string& program) {
  if (program.find('/') != std::string::npos) return program;
  const char* path = getenv("PATH");
  for (absl::string_view dir :
       absl::StrSplit(path != nullptr ? path : "/usr/bin:/bin", ':')) {
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

// This process's environment with `overrides` ("NAME=VALUE") set on top.
std::vector<std::string> MergeEnvironment(
    const std::vector<std::string>& overrides) {
  auto name_of = [](absl::string_view entry) {
    return entry.substr(0, entry.find('='));
  };
  std::vector<std::string> out;
  for (char** e = environ; e != nullptr && *e != nullptr; ++e) {
    const absl::string_view entry(*e);
    const bool replaced = std::any_of(
        overrides.begin(), overrides.end(),
        [&](const std::string& o) { return name_of(o) == name_of(entry); });
    if (!replaced) out.emplace_back(entry);
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

// The child's side of fork(): only async-signal-safe calls. Writes exec's
// errno to `exec_err_fd` if execve fails.
[[noreturn]] void ExecChild(pid_t parent, int out_fd, int exec_err_fd,
                            const char* path, char* const* argv,
                            char* const* env) {
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

}  // namespace

absl::StatusOr<SpawnedChild> SpawnChild(absl::string_view name,
                                        const std::vector<std::string>& argv,
                                        const std::vector<std::string>& env) {
  if (argv.empty()) return absl::InvalidArgumentError("empty argv");
  // Everything the child needs is allocated before fork(): after it, only
  // async-signal-safe calls.
  const std::string path = ResolveProgram(argv[0]);
  if (path.empty()) {
    return absl::FailedPreconditionError(absl::StrCat(
        "cannot execute ", argv[0], " for ", name, ": not found in PATH"));
  }
  std::vector<char*> c_argv = CStrings(argv);
  const std::vector<std::string> environment = MergeEnvironment(env);
  std::vector<char*> c_env = CStrings(environment);

  int out[2];
  if (pipe2(out, O_CLOEXEC) != 0) return ErrnoError("pipe2", errno);
  // Closed by a successful exec (CLOEXEC); carries errno if exec fails.
  int exec_err[2];
  if (pipe2(exec_err, O_CLOEXEC) != 0) {
    const int err = errno;
    close(out[0]);
    close(out[1]);
    return ErrnoError("pipe2", err);
  }
  const pid_t parent = getpid();
  const pid_t pid = fork();
  if (pid < 0) {
    const int err = errno;
    for (int fd : {out[0], out[1], exec_err[0], exec_err[1]}) close(fd);
    return ErrnoError("fork", err);
  }
  if (pid == 0) {
    ExecChild(parent, out[1], exec_err[1], path.c_str(), c_argv.data(),
              c_env.data());
  }
  close(out[1]);
  close(exec_err[1]);
  return AwaitExec(name, argv[0], pid, out[0], exec_err[0]);
}

}  // namespace lockstep
