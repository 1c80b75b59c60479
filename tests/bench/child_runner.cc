#include "tests/bench/child_runner.h"

#include <dirent.h>
#include <fcntl.h>
#include <signal.h>
#include <sys/prctl.h>
#include <sys/wait.h>
#include <unistd.h>

#include <cerrno>
#include <cstdlib>
#include <cstring>
#include <deque>
#include <utility>

#include "absl/strings/numbers.h"
#include "absl/strings/str_cat.h"
#include "absl/strings/str_join.h"
#include "absl/strings/str_split.h"
#include "tests/bench/bench_util.h"

namespace lockstep {

absl::StatusOr<std::unique_ptr<ChildRunner>> ChildRunner::Create(
    const std::string& log_path, int interrupt_fd) {
  const int fd =
      open(log_path.c_str(), O_WRONLY | O_CREAT | O_TRUNC | O_CLOEXEC, 0644);
  if (fd < 0) {
    return absl::InternalError(
        absl::StrCat("cannot open ", log_path, ": ", strerror(errno)));
  }
  return std::unique_ptr<ChildRunner>(
      new ChildRunner(log_path, fd, interrupt_fd));
}

ChildRunner::ChildRunner(std::string log_path, int log_fd, int interrupt_fd)
    : log_path_(std::move(log_path)),
      log_fd_(log_fd),
      group_(ProcessGroupOptions{log_fd, interrupt_fd}) {}

ChildRunner::~ChildRunner() {
  StopAll(absl::Seconds(2));
  close(log_fd_);
}

absl::StatusOr<pid_t> ChildRunner::Start(absl::string_view name,
                                         const std::vector<std::string>& argv) {
  group_.Log(absl::StrCat("starting ", name, ": ", absl::StrJoin(argv, " ")));
  return group_.Start(name, argv);
}

absl::Status ChildRunner::WaitUntil(absl::string_view what,
                                    absl::FunctionRef<bool()> done,
                                    absl::Duration timeout) {
  RunOptions options;
  options.deadline = absl::Now() + timeout;
  // Some conditions (a file appearing) signal no descriptor.
  options.recheck_interval = absl::Milliseconds(5);
  const RunResult result = group_.Run(done, options);
  std::string problem;
  switch (result.reason) {
    case RunResult::Reason::kDone:
      return absl::OkStatus();
    case RunResult::Reason::kChildFailed:
      problem =
          absl::StrCat(result.failure.name, " ", result.failure.Describe());
      break;
    case RunResult::Reason::kInterrupted:
      return absl::CancelledError(absl::StrCat("interrupted by signal ",
                                               result.signal, " while ", what));
    case RunResult::Reason::kDeadline:
      problem = absl::StrCat("timed out after ", absl::FormatDuration(timeout));
      break;
    case RunResult::Reason::kNoneRunning:
      problem = "every process exited first";
      break;
  }
  return absl::InternalError(absl::StrCat(
      what, ": ", problem, "; log ", log_path_, " ends with:\n", LogTail(20)));
}

absl::Status ChildRunner::WaitForExit(absl::string_view what, pid_t pid,
                                      absl::Duration timeout) {
  absl::Status s = WaitUntil(
      what, [&]() { return !group_.IsRunning(pid); }, timeout);
  if (!s.ok()) return s;
  for (const ChildExit& exit : group_.exits()) {
    if (exit.pid == pid && !exit.ok()) {
      return absl::InternalError(
          absl::StrCat(what, ": ", exit.name, " ", exit.Describe(), "; log ",
                       log_path_, " ends with:\n", LogTail(20)));
    }
  }
  return absl::OkStatus();
}

void ChildRunner::StopAll(absl::Duration grace) { group_.Terminate(grace); }

std::string ChildRunner::OutputOf(absl::string_view name) const {
  absl::StatusOr<std::string> log = ReadWholeFile(log_path_);
  return log.ok() ? UntagLines(*log, name) : std::string();
}

std::string ChildRunner::LogTail(int lines) const {
  absl::StatusOr<std::string> log = ReadWholeFile(log_path_);
  if (!log.ok()) return "(no log)";
  std::deque<absl::string_view> tail;
  for (absl::string_view line : absl::StrSplit(*log, '\n', absl::SkipEmpty())) {
    tail.push_back(line);
    if (static_cast<int>(tail.size()) > lines) tail.pop_front();
  }
  return absl::StrJoin(tail, "\n");
}

void AdoptOrphans() { prctl(PR_SET_CHILD_SUBREAPER, 1); }

void ReapOrphans() {
  const pid_t self = getpid();
  DIR* proc = opendir("/proc");
  if (proc == nullptr) return;
  std::vector<pid_t> children;
  while (dirent* entry = readdir(proc)) {
    int pid = 0;
    if (!absl::SimpleAtoi(entry->d_name, &pid)) continue;
    absl::StatusOr<std::string> stat =
        ReadWholeFile(absl::StrCat("/proc/", pid, "/stat"));
    if (!stat.ok()) continue;
    // "pid (comm) state ppid ...": comm may hold spaces, so start after ')'.
    const size_t paren = stat->rfind(')');
    if (paren == std::string::npos) continue;
    std::vector<absl::string_view> fields = absl::StrSplit(
        absl::string_view(*stat).substr(paren + 1), ' ', absl::SkipEmpty());
    int ppid = 0;
    if (fields.size() > 1 && absl::SimpleAtoi(fields[1], &ppid) &&
        ppid == self) {
      children.push_back(pid);
    }
  }
  closedir(proc);
  for (pid_t pid : children) {
    kill(pid, SIGKILL);
    while (waitpid(pid, nullptr, 0) < 0 && errno == EINTR) {
    }
  }
}

}  // namespace lockstep
