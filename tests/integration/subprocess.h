// Child processes for integration tests: start a real binary with its output
// captured in a file, wait for it with a deadline, kill it. Not thread-safe.
#ifndef LOCKSTEP_TESTS_INTEGRATION_SUBPROCESS_H_
#define LOCKSTEP_TESTS_INTEGRATION_SUBPROCESS_H_

#include <sys/types.h>

#include <optional>
#include <string>
#include <vector>

#include "absl/time/time.h"

namespace lockstep {

class Subprocess final {
 public:
  // Starts argv[0] (a path) with `env` added to this process's environment
  // ("NAME=value" entries). Output goes to a temporary file.
  static Subprocess Start(const std::vector<std::string>& argv,
                          const std::vector<std::string>& env = {});
  ~Subprocess();
  Subprocess(Subprocess&& other) noexcept;
  Subprocess& operator=(Subprocess&&) = delete;

  // Exit code (128 + signal for a signal), or nullopt when `timeout` passed.
  std::optional<int> Wait(absl::Duration timeout);
  void Kill();
  // Everything the child wrote to stdout and stderr so far.
  std::string Output() const;
  pid_t pid() const { return pid_; }

 private:
  Subprocess(pid_t pid, std::string output_path)
      : pid_(pid), output_path_(std::move(output_path)) {}
  pid_t pid_ = -1;
  std::optional<int> exit_code_;
  std::string output_path_;
};

struct RunResult {
  int exit_code = -1;  // -1: timed out (the child was killed).
  std::string output;
};

// Runs to completion (or kills at `timeout`).
RunResult RunProcess(const std::vector<std::string>& argv,
                     const std::vector<std::string>& env = {},
                     absl::Duration timeout = absl::Seconds(60));

// A fresh temporary directory.
std::string MakeTempDir();

// A port free on loopback now (the kernel's pick, released at once: another
// process may take it before the caller binds it).
int FreePort();

// Reads a whole file; empty when missing.
std::string ReadFile(const std::string& path);

}  // namespace lockstep

#endif  // LOCKSTEP_TESTS_INTEGRATION_SUBPROCESS_H_
