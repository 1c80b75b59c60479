// What daemon.cc and daemon_state.cc share: the log line and the drain's
// wait. Not for use outside server/daemon.
#ifndef LOCKSTEP_SERVER_DAEMON_DAEMON_INTERNAL_H_
#define LOCKSTEP_SERVER_DAEMON_DAEMON_INTERNAL_H_

#include <cstdio>
#include <string>

#include "absl/time/time.h"

namespace lockstep {
namespace daemon_internal {

// How long a drain's checkpoint waits for the chunks to line up (the step
// under way to reach every chunk): well inside Kubernetes' default 30 s
// grace period.
inline constexpr absl::Duration kDrainCheckpointWait = absl::Seconds(20);

// "lockstep_server: MESSAGE" on stderr, flushed.
inline void Log(const std::string& message) {
  std::fprintf(stderr, "lockstep_server: %s\n", message.c_str());
  std::fflush(stderr);
}

}  // namespace daemon_internal
}  // namespace lockstep

#endif  // LOCKSTEP_SERVER_DAEMON_DAEMON_INTERNAL_H_
