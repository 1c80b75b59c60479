// The worker's stop signals (SIGTERM, SIGINT) and the watchdog that bounds
// how long a stop takes.
//
// The first signal asks the trainer to leave after the current step
// (requested()). A worker whose step ends soon leaves as it always has.
// One still busy kCancelAfter after the signal is waiting (for an absent
// peer, a server that does not answer): the watchdog cancels its waiting
// calls (token(): pushes, pulls, registrations fail with CANCELLED), the
// trainer takes the failed step as the stop, leaves the job with a short
// deadline and the worker exits 143. One still busy kExitAfter after the
// signal is in a wait that cannot be cancelled (gloo's, the all-reduce
// rendezvous) or a long computation: the watchdog runs the last-leave
// function (SetLastLeave: it tells the servers, briefly) and exits 143
// itself. A second signal kSameStop or more after the first exits at once;
// one sooner is the same stop delivered twice (a terminal's Ctrl-C reaches
// every process of a launcher's group, and the launcher passes it on as
// SIGTERM).
//
// Process-wide: Install once, at the start of main. Thread-safe.
#ifndef LOCKSTEP_WORKER_APP_STOP_SIGNALS_H_
#define LOCKSTEP_WORKER_APP_STOP_SIGNALS_H_

#include <atomic>
#include <functional>

#include "absl/status/status.h"
#include "absl/time/time.h"
#include "worker/exchange/ps/cancel_token.h"

namespace lockstep {

class StopSignals final {
 public:
  static constexpr absl::Duration kCancelAfter = absl::Milliseconds(500);
  static constexpr absl::Duration kExitAfter = absl::Milliseconds(1500);

  // Installs the handlers and starts the watchdog; `rank` names the
  // worker in its lines. Returns the process's one instance.
  static StopSignals* Install(int rank);

  // Set by the first signal.
  const std::atomic<bool>* requested() const;
  // Cancelled by the watchdog (kCancelAfter).
  CancelToken* token();

  // What the watchdog runs before it exits on its own (kExitAfter); it
  // must be callable from the watchdog's thread while the training thread
  // is inside a call, and stay valid until Done().
  void SetLastLeave(std::function<absl::Status()> leave);
  // The run has ended (its leave included): the watchdog does nothing
  // more. Blocks while the watchdog is leaving (it then exits).
  void Done();

 private:
  StopSignals() = default;
};

}  // namespace lockstep

#endif  // LOCKSTEP_WORKER_APP_STOP_SIGNALS_H_
