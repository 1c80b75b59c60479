// Runs the benchmark's helper processes (servers, workers, launchers, peer
// scripts, iperf3) with their output in a log file instead of the terminal.
#ifndef LOCKSTEP_TESTS_BENCH_CHILD_RUNNER_H_
#define LOCKSTEP_TESTS_BENCH_CHILD_RUNNER_H_

#include <sys/types.h>

#include <memory>
#include <string>
#include <vector>

#include "absl/functional/function_ref.h"
#include "absl/status/status.h"
#include "absl/status/statusor.h"
#include "absl/strings/string_view.h"
#include "absl/time/time.h"
#include "deploy/launch/process_group.h"

namespace lockstep {

// One ProcessGroup (see deploy/launch/process_group.h) whose children's
// tagged output goes to a log file, with waits that always have a deadline
// and errors that quote the end of the log. Every child is stopped by
// StopAll or, at the latest, by the destructor (SIGKILL), and gets SIGKILL
// if this process dies. Thread-compatible; forks, so start children before
// this process starts gRPC threads.
class ChildRunner final {
 public:
  // Creates (or truncates) the log at `log_path`. `interrupt_fd`: a
  // SignalPipe's read end, or -1.
  static absl::StatusOr<std::unique_ptr<ChildRunner>> Create(
      const std::string& log_path, int interrupt_fd);
  ~ChildRunner();

  ChildRunner(const ChildRunner&) = delete;
  ChildRunner& operator=(const ChildRunner&) = delete;

  absl::StatusOr<pid_t> Start(absl::string_view name,
                              const std::vector<std::string>& argv);

  // Pumps output until `done()` is true. Fails, naming `what`, when a child
  // fails, a signal arrives, or `timeout` passes first.
  absl::Status WaitUntil(absl::string_view what, absl::FunctionRef<bool()> done,
                         absl::Duration timeout);
  // Waits for `pid` to exit with code 0.
  absl::Status WaitForExit(absl::string_view what, pid_t pid,
                           absl::Duration timeout);

  // SIGTERM to every running child, SIGKILL after `grace`.
  void StopAll(absl::Duration grace = absl::Seconds(10));

  bool IsRunning(pid_t pid) const { return group_.IsRunning(pid); }
  const std::string& log_path() const { return log_path_; }
  // The log's output of child `name`, without the tags.
  std::string OutputOf(absl::string_view name) const;

 private:
  ChildRunner(std::string log_path, int log_fd, int interrupt_fd);
  std::string LogTail(int lines) const;

  const std::string log_path_;
  const int log_fd_;
  ProcessGroup group_;
};

// This process adopts orphaned descendants (PR_SET_CHILD_SUBREAPER), so
// that ReapOrphans can stop grandchildren whose parent died, such as a peer
// script's worker processes.
void AdoptOrphans();

// SIGKILLs and reaps every child of this process. Call only when no
// ChildRunner has a running child: what is left then is an adopted orphan.
void ReapOrphans();

}  // namespace lockstep

#endif  // LOCKSTEP_TESTS_BENCH_CHILD_RUNNER_H_
