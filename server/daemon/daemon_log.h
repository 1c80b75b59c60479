// Where the server's parts say what they do: one line each, prefixed
// "lockstep_server: " on stderr in the process (LogToStderr), captured by
// the unit tests. Each part of the Daemon takes a DaemonLog.
#ifndef LOCKSTEP_SERVER_DAEMON_DAEMON_LOG_H_
#define LOCKSTEP_SERVER_DAEMON_DAEMON_LOG_H_

#include <cstdio>
#include <functional>
#include <string>

namespace lockstep {

// Takes one line (no newline); may be called from any thread.
using DaemonLog = std::function<void(const std::string& line)>;

// "lockstep_server: LINE" on stderr, flushed.
inline void LogToStderr(const std::string& line) {
  std::fprintf(stderr, "lockstep_server: %s\n", line.c_str());
  std::fflush(stderr);
}

}  // namespace lockstep

#endif  // LOCKSTEP_SERVER_DAEMON_DAEMON_LOG_H_
