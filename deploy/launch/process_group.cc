#include "deploy/launch/process_group.h"

#include <errno.h>
#include <poll.h>
#include <signal.h>
#include <string.h>
#include <sys/syscall.h>
#include <sys/wait.h>
#include <unistd.h>

#include <algorithm>
#include <cmath>
#include <string>
#include <utility>
#include <vector>

#include "absl/status/status.h"
#include "absl/strings/str_cat.h"
#include "common/base/status_macros.h"
#include "deploy/launch/line_prefixer.h"
#include "deploy/launch/spawn.h"

namespace lockstep {
namespace {

// Without a pidfd, exits are noticed by checking this often.
constexpr absl::Duration kReapTick = absl::Milliseconds(50);
constexpr size_t kReadChunk = 64 * 1024;
// What a child stopped by closing its stdin gets beyond the grace period
// before SIGKILL: its own grace runs on its host (remote_spawn.h), and its
// exit has to come back over ssh.
constexpr absl::Duration kStdinStopMargin = absl::Seconds(3);

void CloseFd(int& fd) {
  if (fd >= 0) close(fd);
  fd = -1;
}

// Writes all of `data`; output errors (a closed terminal, EPIPE) drop the
// text rather than stop the launcher, which still has children to manage.
void WriteAll(int fd, absl::string_view data) {
  while (!data.empty()) {
    const ssize_t n = write(fd, data.data(), data.size());
    if (n > 0) {
      data.remove_prefix(static_cast<size_t>(n));
    } else if (n < 0 && errno == EINTR) {
      continue;
    } else if (n < 0 && (errno == EAGAIN || errno == EWOULDBLOCK)) {
      pollfd pfd = {fd, POLLOUT, 0};
      poll(&pfd, 1, 100);
    } else {
      return;
    }
  }
}

int PidfdOpen(pid_t pid) {
#ifdef SYS_pidfd_open
  return static_cast<int>(syscall(SYS_pidfd_open, pid, 0));
#else
  return -1;
#endif
}

int PollTimeoutMs(absl::Time until, bool need_tick) {
  absl::Duration wait = until - absl::Now();
  if (need_tick) wait = std::min(wait, kReapTick);
  if (wait == absl::InfiniteDuration()) return -1;
  if (wait <= absl::ZeroDuration()) return 0;
  // Round up so we do not wake just before `until` and spin.
  return static_cast<int>(
      std::min(std::ceil(absl::ToDoubleMilliseconds(wait)), 1e9));
}

}  // namespace

struct ProcessGroup::Child {
  Child(std::string name_in, pid_t pid_in, int out_fd_in, int in_fd_in,
        int pidfd_in)
      : name(std::move(name_in)),
        pid(pid_in),
        out_fd(out_fd_in),
        in_fd(in_fd_in),
        pidfd(pidfd_in),
        prefixer(absl::StrCat("[", name, "] ")) {}

  std::string name;
  pid_t pid;
  int out_fd;  // Read end of the output pipe; -1 after EOF.
  int in_fd;   // Write end of its stdin pipe; -1 if none or closed.
  int pidfd;   // -1 once reaped, or if pidfd_open failed.
  bool running = true;
  LinePrefixer prefixer;
};

bool ChildExit::ok() const {
  return WIFEXITED(wait_status) && WEXITSTATUS(wait_status) == 0;
}

std::string ChildExit::Describe() const {
  if (WIFEXITED(wait_status)) {
    return absl::StrCat("exited with code ", WEXITSTATUS(wait_status));
  }
  if (WIFSIGNALED(wait_status)) {
    const int sig = WTERMSIG(wait_status);
    return absl::StrCat("was killed by signal ", sig, " (", strsignal(sig), ")",
                        WCOREDUMP(wait_status) ? ", core dumped" : "");
  }
  return absl::StrCat("ended with wait status ", wait_status);
}

ProcessGroup::ProcessGroup(ProcessGroupOptions options) : options_(options) {}

ProcessGroup::~ProcessGroup() {
  KillAll(SIGKILL);
  std::vector<ChildExit> ignored;
  for (auto& child : children_) {
    if (child->running) Reap(*child, /*block=*/true, &ignored);
    CloseFd(child->out_fd);
    CloseFd(child->in_fd);
    CloseFd(child->pidfd);
  }
}

absl::StatusOr<pid_t> ProcessGroup::Start(absl::string_view name,
                                          const std::vector<std::string>& argv,
                                          const std::vector<std::string>& env,
                                          bool stop_by_closing_stdin) {
  ASSIGN_OR_RETURN(const SpawnedChild spawned,
                   SpawnChild(name, argv, env, stop_by_closing_stdin));
  children_.push_back(std::make_unique<Child>(std::string(name), spawned.pid,
                                              spawned.out_fd, spawned.in_fd,
                                              PidfdOpen(spawned.pid)));
  return spawned.pid;
}

RunResult ProcessGroup::Run(absl::FunctionRef<bool()> done,
                            const RunOptions& options) {
  RunResult result;
  for (;;) {
    if (interrupt_signal_ != 0) {
      result.reason = RunResult::Reason::kInterrupted;
      result.signal = std::exchange(interrupt_signal_, 0);
      return result;
    }
    if (done()) {
      result.reason = RunResult::Reason::kDone;
      return result;
    }
    if (num_running() == 0) {
      result.reason = RunResult::Reason::kNoneRunning;
      return result;
    }
    const absl::Time now = absl::Now();
    if (now >= options.deadline) {
      result.reason = RunResult::Reason::kDeadline;
      return result;
    }
    std::vector<ChildExit> exited;
    PollOnce(std::min(options.deadline, now + options.recheck_interval),
             &exited);
    if (interrupt_signal_ != 0) continue;
    for (const ChildExit& exit : exited) {
      if (!exit.ok()) {
        result.reason = RunResult::Reason::kChildFailed;
        result.failure = exit;
        return result;
      }
    }
  }
}

void ProcessGroup::Terminate(absl::Duration grace) {
  if (num_running() == 0) return;
  const bool by_stdin = std::any_of(
      children_.begin(), children_.end(),
      [](const auto& child) { return child->running && child->in_fd >= 0; });
  KillAll(SIGTERM);
  const absl::Time deadline =
      absl::Now() + grace +
      (by_stdin ? kStdinStopMargin : absl::ZeroDuration());
  std::vector<ChildExit> ignored;
  while (num_running() > 0 && absl::Now() < deadline &&
         interrupt_signal_ == 0) {
    PollOnce(deadline, &ignored);
  }
  if (std::exchange(interrupt_signal_, 0) != 0 && num_running() > 0) {
    Log("interrupted again: not waiting for the grace period");
  }
  for (auto& child : children_) {
    if (!child->running) continue;
    Log(absl::StrCat(child->name, " (pid ", child->pid,
                     ") is still running after SIGTERM; sending SIGKILL"));
    kill(child->pid, SIGKILL);
  }
  for (auto& child : children_) {
    if (child->running) Reap(*child, /*block=*/true, &ignored);
  }
}

void ProcessGroup::Log(absl::string_view message) {
  Write(nullptr, absl::StrCat("[launch] ", message, "\n"));
}

bool ProcessGroup::IsRunning(pid_t pid) const {
  for (const auto& child : children_) {
    if (child->pid == pid) return child->running;
  }
  return false;
}

int ProcessGroup::num_running() const {
  return static_cast<int>(
      std::count_if(children_.begin(), children_.end(),
                    [](const auto& child) { return child->running; }));
}

void ProcessGroup::PollOnce(absl::Time until, std::vector<ChildExit>* exited) {
  std::vector<pollfd> fds;
  // What each pollfd is for: -1 the interrupt fd, 2*i child i's output,
  // 2*i+1 child i's pidfd.
  std::vector<int> owners;
  if (options_.interrupt_fd >= 0 && !interrupt_closed_) {
    fds.push_back({options_.interrupt_fd, POLLIN, 0});
    owners.push_back(-1);
  }
  bool need_tick = false;
  for (size_t i = 0; i < children_.size(); ++i) {
    const Child& child = *children_[i];
    if (child.out_fd >= 0) {
      fds.push_back({child.out_fd, POLLIN, 0});
      owners.push_back(static_cast<int>(2 * i));
    }
    if (child.running && child.pidfd >= 0) {
      fds.push_back({child.pidfd, POLLIN, 0});
      owners.push_back(static_cast<int>(2 * i + 1));
    }
    if (child.running && child.pidfd < 0) need_tick = true;
  }
  const int ready =
      poll(fds.data(), fds.size(), PollTimeoutMs(until, need_tick));
  // EINTR: a signal handler ran; its byte is on the interrupt fd for the next
  // round.
  if (ready < 0) return;

  for (size_t k = 0; k < fds.size(); ++k) {
    if (fds[k].revents == 0) continue;
    if (owners[k] == -1) {
      unsigned char sig = 0;
      const ssize_t n = read(options_.interrupt_fd, &sig, 1);
      if (n == 1) interrupt_signal_ = sig;
      if (n == 0) interrupt_closed_ = true;
    } else if (owners[k] % 2 == 0) {
      Pump(*children_[owners[k] / 2], /*max_reads=*/1);
    }
  }
  for (auto& child : children_) {
    if (child->running) Reap(*child, /*block=*/false, exited);
  }
}

void ProcessGroup::Pump(Child& child, int max_reads) {
  char buf[kReadChunk];
  for (int i = 0; i < max_reads && child.out_fd >= 0; ++i) {
    const ssize_t n = read(child.out_fd, buf, sizeof(buf));
    if (n < 0 && errno == EINTR) continue;
    if (n < 0 && (errno == EAGAIN || errno == EWOULDBLOCK)) return;
    if (n <= 0) {  // EOF, or an error that will not go away.
      CloseFd(child.out_fd);
      return;
    }
    std::string text;
    child.prefixer.Feed(absl::string_view(buf, static_cast<size_t>(n)), &text);
    Write(&child, text);
  }
}

void ProcessGroup::Reap(Child& child, bool block,
                        std::vector<ChildExit>* exited) {
  int status = 0;
  pid_t r;
  do {
    r = waitpid(child.pid, &status, block ? 0 : WNOHANG);
  } while (r < 0 && errno == EINTR);
  if (r == 0) return;  // Still running.
  child.running = false;
  CloseFd(child.pidfd);
  CloseFd(child.in_fd);
  if (r < 0) {
    Log(absl::StrCat("lost track of ", child.name, " (pid ", child.pid,
                     "): ", strerror(errno)));
    return;
  }
  // What the child wrote before exiting is in the pipe already: print it
  // before anyone reports the exit. The pipe stays open if a grandchild
  // still holds it.
  Pump(child, /*max_reads=*/16);
  std::string text;
  child.prefixer.Flush(&text);
  Write(&child, text);
  ChildExit exit{child.name, child.pid, status};
  exits_.push_back(exit);
  exited->push_back(std::move(exit));
}

void ProcessGroup::Write(Child* child, absl::string_view text) {
  if (text.empty()) return;
  if (open_line_owner_ != nullptr && open_line_owner_ != child) {
    // Another child's progress bar holds the line: move below it.
    WriteAll(options_.output_fd, "\n");
    open_line_owner_->prefixer.LineEnded();
  }
  WriteAll(options_.output_fd, text);
  open_line_owner_ =
      (child != nullptr && child->prefixer.line_open()) ? child : nullptr;
}

void ProcessGroup::KillAll(int signal) {
  // Not yet reaped, so no pid here can have been reused.
  for (auto& child : children_) {
    if (!child->running) continue;
    if (signal == SIGTERM && child->in_fd >= 0) {
      CloseFd(child->in_fd);  // Its stop request.
    } else {
      kill(child->pid, signal);
    }
  }
}

}  // namespace lockstep
