#include "deploy/launch/signal_pipe.h"

#include <errno.h>
#include <fcntl.h>
#include <string.h>
#include <unistd.h>

#include "absl/status/status.h"
#include "absl/strings/str_cat.h"

namespace lockstep {
namespace {

// The one piece of global state: a signal handler has no other way to find
// the pipe. Set before any handler is installed, reset after all are removed.
volatile sig_atomic_t g_write_fd = -1;

void OnSignal(int sig) {
  const int saved_errno = errno;
  const unsigned char byte = static_cast<unsigned char>(sig);
  // Non-blocking: if the pipe is full, the loop has signals to read anyway.
  ssize_t ignored = write(g_write_fd, &byte, 1);
  (void)ignored;
  errno = saved_errno;
}

}  // namespace

absl::StatusOr<std::unique_ptr<SignalPipe>> SignalPipe::Create(
    const std::vector<int>& signals) {
  if (g_write_fd != -1) {
    return absl::FailedPreconditionError("a SignalPipe already exists");
  }
  int fds[2];
  if (pipe2(fds, O_CLOEXEC | O_NONBLOCK) != 0) {
    return absl::InternalError(absl::StrCat("pipe2: ", strerror(errno)));
  }
  std::unique_ptr<SignalPipe> pipe(new SignalPipe(fds[0], fds[1]));
  g_write_fd = fds[1];
  for (int sig : signals) {
    struct sigaction action = {};
    action.sa_handler = OnSignal;
    sigemptyset(&action.sa_mask);
    // No SA_RESTART: an interrupted poll() returns at once and sees the byte.
    struct sigaction previous;
    if (sigaction(sig, &action, &previous) != 0) {
      return absl::InternalError(
          absl::StrCat("sigaction(", sig, "): ", strerror(errno)));
    }
    pipe->previous_.emplace_back(sig, previous);
  }
  return pipe;
}

SignalPipe::~SignalPipe() {
  for (const auto& [sig, previous] : previous_) {
    sigaction(sig, &previous, nullptr);
  }
  g_write_fd = -1;
  close(read_fd_);
  close(write_fd_);
}

}  // namespace lockstep
