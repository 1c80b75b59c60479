// Runs a set of child processes and merges their output, tagged per child.
#ifndef LOCKSTEP_DEPLOY_LAUNCH_PROCESS_GROUP_H_
#define LOCKSTEP_DEPLOY_LAUNCH_PROCESS_GROUP_H_

#include <sys/types.h>

#include <memory>
#include <string>
#include <vector>

#include "absl/functional/function_ref.h"
#include "absl/status/statusor.h"
#include "absl/strings/string_view.h"
#include "absl/time/time.h"

namespace lockstep {

// How one child ended.
struct ChildExit {
  std::string name;
  pid_t pid = -1;
  int wait_status = 0;  // As returned by waitpid().

  // Exited by itself with code 0.
  bool ok() const;
  // "exited with code 3" or "was killed by signal 9 (Killed)".
  std::string Describe() const;
};

struct ProcessGroupOptions {
  // Where the children's prefixed output and Log() messages go. Not owned.
  int output_fd = 1;
  // Optional. When it becomes readable, Run() reads one byte (a signal number,
  // as SignalPipe writes it) and returns kInterrupted. Not owned.
  int interrupt_fd = -1;
};

struct RunOptions {
  // Run() gives up at this time.
  absl::Time deadline = absl::InfiniteFuture();
  // `done` is re-checked at least this often, for conditions that no file
  // descriptor signals (a port file appearing). By default only after events.
  absl::Duration recheck_interval = absl::InfiniteDuration();
};

struct RunResult {
  enum class Reason {
    kDone,         // `done` returned true.
    kChildFailed,  // A child exited non-zero or by a signal: `failure`.
    kInterrupted,  // The interrupt fd fired: `signal`.
    kDeadline,     // RunOptions::deadline passed.
    kNoneRunning,  // Every child has exited (successfully), `done` is false.
  };
  Reason reason = Reason::kDone;
  ChildExit failure;
  int signal = 0;
};

// Owns a set of child processes: starts them with stdout and stderr on one
// pipe each, pumps the pipes with poll() into one output, each line tagged
// "[name] " (see LinePrefixer), reaps the children as they exit, and stops
// them. The caller drives it from one thread through Run() and Terminate();
// nothing happens in the background.
//
// Children stay in the launcher's process group, so a terminal's Ctrl-C
// reaches them directly (except those stopped by closing their stdin). None
// outlives the group: each child gets PR_SET_PDEATHSIG=SIGKILL (covers the
// launcher being killed), and the destructor SIGKILLs and reaps any child still
// running.
//
// Exits are seen through a pidfd per child (Linux >= 5.3); where pidfd_open
// fails, the loop falls back to checking with waitpid every 50 ms.
//
// Thread-compatible: externally synchronized. Forks, so it is meant for a
// single-threaded program such as the launcher or a test.
class ProcessGroup final {
 public:
  explicit ProcessGroup(ProcessGroupOptions options);
  ~ProcessGroup();

  ProcessGroup(const ProcessGroup&) = delete;
  ProcessGroup& operator=(const ProcessGroup&) = delete;

  // Starts argv[0] with arguments argv[1..]: a path, or a bare name looked
  // up in PATH as a shell does. `env` ("NAME=VALUE" entries) is set on top
  // of the launcher's own environment. Returns its pid, or an error if it
  // cannot be executed (the child reports the exec error back, so a missing
  // binary fails here, not later). With `stop_by_closing_stdin` the child's
  // stdin is a pipe the group holds open, and Terminate() asks it to stop
  // by closing that pipe rather than with SIGTERM (how an ssh child passes
  // the stop on to its host: remote_spawn.h); such a child runs in a process
  // group of its own, so a Ctrl-C stops it through the launcher too.
  absl::StatusOr<pid_t> Start(absl::string_view name,
                              const std::vector<std::string>& argv,
                              const std::vector<std::string>& env = {},
                              bool stop_by_closing_stdin = false);

  // Pumps output and reaps children until `done()` is true or one of the
  // other reasons in RunResult occurs. A child exiting 0 is not a stop reason
  // by itself. When several things happen at once, an interrupt wins over a
  // child failure, which wins over `done`.
  RunResult Run(absl::FunctionRef<bool()> done, const RunOptions& options);

  // Sends SIGTERM to every running child (or closes its stdin, see
  // Start()), keeps pumping output until all have exited or `grace` passes
  // (3 s more when a child is stopped by its stdin, whose host keeps its
  // own grace period), then SIGKILLs and reaps the rest (logging each).
  // An interrupt during the grace period skips the rest of it.
  void Terminate(absl::Duration grace);

  // Writes "[launch] <message>\n" to the output, after ending a progress-bar
  // line that a child left open.
  void Log(absl::string_view message);

  bool IsRunning(pid_t pid) const;
  int num_running() const;
  // Every exit reaped so far, in the order seen.
  const std::vector<ChildExit>& exits() const { return exits_; }

 private:
  struct Child;

  // One poll() round, waiting until `until` at most. Pumps readable pipes,
  // reaps exited children (appending to exits_ and *exited), and records an
  // interrupt in interrupt_signal_.
  void PollOnce(absl::Time until, std::vector<ChildExit>* exited);
  // Reads what `child`'s pipe holds now; closes it at EOF. `max_reads` bounds
  // the loop against a writer faster than us.
  void Pump(Child& child, int max_reads);
  // Reaps `child` if it has exited.
  void Reap(Child& child, bool block, std::vector<ChildExit>* exited);
  // Writes `text` as coming from `child` (nullptr: the launcher itself).
  void Write(Child* child, absl::string_view text);
  void KillAll(int signal);

  const ProcessGroupOptions options_;
  std::vector<std::unique_ptr<Child>> children_;
  std::vector<ChildExit> exits_;
  Child* open_line_owner_ = nullptr;  // Child whose bar line is open; or null.
  int interrupt_signal_ = 0;          // Unconsumed interrupt, 0 if none.
  bool interrupt_closed_ = false;     // The interrupt fd reached EOF.
};

}  // namespace lockstep

#endif  // LOCKSTEP_DEPLOY_LAUNCH_PROCESS_GROUP_H_
