#include "deploy/launch/flag_probe.h"

#include <errno.h>
#include <poll.h>
#include <signal.h>
#include <sys/wait.h>
#include <unistd.h>

#include <algorithm>
#include <cstdint>

#include "absl/strings/ascii.h"
#include "absl/strings/str_cat.h"
#include "absl/time/clock.h"
#include "deploy/launch/spawn.h"

namespace lockstep {
namespace {

// A Lockstep binary answers these at once; more means something is wrong.
constexpr absl::Duration kProbeTimeout = absl::Seconds(30);

// Reads `fd` (non-blocking) until end of file or `deadline`; whether the
// end was reached.
bool ReadAll(int fd, absl::Time deadline, std::string* out) {
  char buf[4096];
  while (true) {
    const ssize_t n = read(fd, buf, sizeof(buf));
    if (n > 0) {
      out->append(buf, static_cast<size_t>(n));
      continue;
    }
    if (n == 0) return true;
    if (errno == EINTR) continue;
    if (errno != EAGAIN) return true;  // Nothing more can come.
    const absl::Duration left = deadline - absl::Now();
    if (left <= absl::ZeroDuration()) return false;
    pollfd p = {fd, POLLIN, 0};
    poll(&p, 1,
         static_cast<int>(
             std::min<int64_t>(absl::ToInt64Milliseconds(left) + 1, 1000)));
  }
}

}  // namespace

absl::StatusOr<ProgramRun> RunToEnd(const std::vector<std::string>& argv,
                                    absl::Duration timeout) {
  if (argv.empty()) return absl::InvalidArgumentError("empty argv");
  absl::StatusOr<SpawnedChild> child = SpawnChild(argv[0], argv, {});
  if (!child.ok()) return child.status();
  ProgramRun run;
  const bool ended = ReadAll(child->out_fd, absl::Now() + timeout, &run.output);
  close(child->out_fd);
  if (!ended) kill(child->pid, SIGKILL);
  int status = 0;
  while (waitpid(child->pid, &status, 0) < 0 && errno == EINTR) {
  }
  if (!ended) {
    return absl::DeadlineExceededError(absl::StrCat(
        argv[0], " did not finish within ", absl::FormatDuration(timeout)));
  }
  run.exit_code =
      WIFEXITED(status) ? WEXITSTATUS(status) : 128 + WTERMSIG(status);
  return run;
}

absl::StatusOr<FlagTable> ListFlags(const std::string& path) {
  absl::StatusOr<ProgramRun> run =
      RunToEnd({path, "--list_flags"}, kProbeTimeout);
  if (!run.ok()) return run.status();
  absl::StatusOr<FlagTable> table = FlagTable::Parse(run->output);
  if (run->exit_code != 0 || !table.ok()) {
    return absl::FailedPreconditionError(absl::StrCat(
        path, " --list_flags exited ", run->exit_code,
        " without a flag table: ", absl::StripAsciiWhitespace(run->output)));
  }
  return table;
}

absl::Status ValidateCommandLine(const std::vector<std::string>& argv) {
  std::vector<std::string> check = argv;
  check.push_back("--validate_only");
  absl::StatusOr<ProgramRun> run = RunToEnd(check, kProbeTimeout);
  if (!run.ok()) return run.status();
  if (run->exit_code == 0) return absl::OkStatus();
  return absl::InvalidArgumentError(absl::StripAsciiWhitespace(run->output));
}

}  // namespace lockstep
