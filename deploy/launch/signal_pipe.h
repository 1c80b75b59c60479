// Delivers signals to a poll() loop.
#ifndef LOCKSTEP_DEPLOY_LAUNCH_SIGNAL_PIPE_H_
#define LOCKSTEP_DEPLOY_LAUNCH_SIGNAL_PIPE_H_

#include <signal.h>

#include <memory>
#include <utility>
#include <vector>

#include "absl/status/statusor.h"

namespace lockstep {

// The self-pipe trick: while an instance lives, each of the given signals
// makes its handler write the signal number as one byte to a pipe, whose
// read end a poll() loop watches (ProcessGroupOptions::interrupt_fd). The
// handler only calls write(), so it is async-signal-safe, and nothing is
// lost to a signal that lands just before poll() starts.
//
// Signal dispositions are process-wide, so at most one instance may exist at
// a time (Create fails otherwise); the destructor restores the previous
// handlers. Thread-compatible.
class SignalPipe final {
 public:
  static absl::StatusOr<std::unique_ptr<SignalPipe>> Create(
      const std::vector<int>& signals);
  ~SignalPipe();

  SignalPipe(const SignalPipe&) = delete;
  SignalPipe& operator=(const SignalPipe&) = delete;

  // Readable when a signal arrived; each byte is one signal's number.
  int read_fd() const { return read_fd_; }

 private:
  SignalPipe(int read_fd, int write_fd)
      : read_fd_(read_fd), write_fd_(write_fd) {}

  const int read_fd_;
  const int write_fd_;
  std::vector<std::pair<int, struct sigaction>> previous_;
};

}  // namespace lockstep

#endif  // LOCKSTEP_DEPLOY_LAUNCH_SIGNAL_PIPE_H_
