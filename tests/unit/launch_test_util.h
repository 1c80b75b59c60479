// What the launcher's tests share: an in-memory stand-in for stdout and
// shorthand for /bin/sh children and run deadlines.
#ifndef LOCKSTEP_TESTS_UNIT_LAUNCH_TEST_UTIL_H_
#define LOCKSTEP_TESTS_UNIT_LAUNCH_TEST_UTIL_H_

#include <sys/mman.h>
#include <sys/stat.h>
#include <unistd.h>

#include <string>
#include <vector>

#include "absl/time/clock.h"
#include "absl/time/time.h"
#include "deploy/launch/process_group.h"

namespace lockstep {

// An in-memory file standing in for the launcher's stdout. Unlike a pipe it
// never fills up, so nobody has to read it while the group runs.
class Sink final {
 public:
  Sink() : fd_(memfd_create("launcher_test_sink", MFD_CLOEXEC)) {}
  ~Sink() { close(fd_); }
  int fd() const { return fd_; }
  std::string Read() const {
    struct stat st;
    fstat(fd_, &st);
    std::string text(static_cast<size_t>(st.st_size), '\0');
    const ssize_t n = pread(fd_, text.data(), text.size(), 0);
    text.resize(n > 0 ? static_cast<size_t>(n) : 0);
    return text;
  }

 private:
  const int fd_;
};

inline std::vector<std::string> Sh(const std::string& script) {
  return {"/bin/sh", "-c", script};
}

inline ProcessGroupOptions To(const Sink& sink) {
  ProcessGroupOptions options;
  options.output_fd = sink.fd();
  return options;
}

inline RunOptions Within(absl::Duration timeout) {
  RunOptions options;
  options.deadline = absl::Now() + timeout;
  return options;
}

}  // namespace lockstep

#endif  // LOCKSTEP_TESTS_UNIT_LAUNCH_TEST_UTIL_H_
