// The daemon's watch over the job, checked on each tick: steps that wait
// too long for a worker (a warning at half the timeout; at the timeout the
// job fails under --on_worker_loss=fail, else waits for a replacement), a
// job that no worker has called for --no_worker_timeout_s (every worker
// lost and none replaced: save what is unsaved, exit retryable; a call to
// the coordinator counts, all-reduce ranks making no other), and the
// job's end once every worker has left (save, write the weights file,
// exit 0). Each check returns the exit code to stop with, or nullopt.
//
// Owns nothing but its options; the core, checkpointer and weights writer
// are not owned (the last two may be null: none configured). Called from
// the daemon's serving thread only (thread-compatible); what it calls is
// thread-safe.
#ifndef LOCKSTEP_SERVER_DAEMON_JOB_WATCHDOG_H_
#define LOCKSTEP_SERVER_DAEMON_JOB_WATCHDOG_H_

#include <map>
#include <optional>
#include <string>

#include "absl/time/time.h"
#include "server/coordination/contact_clock.h"
#include "server/core/parameter_server.h"
#include "server/daemon/checkpointer.h"
#include "server/daemon/daemon_log.h"
#include "server/daemon/weights_file_writer.h"

namespace lockstep {

class JobWatchdog final {
 public:
  struct Options {
    absl::Duration step_timeout = absl::ZeroDuration();  // Zero: none.
    bool fail_on_worker_loss = false;
    // Zero: wait for workers forever.
    absl::Duration no_worker_timeout = absl::ZeroDuration();
    bool exit_when_done = true;
  };

  // `coordinator` (not owned; may be null) is when a worker last called
  // the coordinator.
  JobWatchdog(const Options& options, ParameterServer* core,
              Checkpointer* checkpointer, WeightsFileWriter* weights,
              DaemonLog log, const ContactClock* coordinator = nullptr);

  // The step-timeout watchdog: kExitRetryable when a lost worker fails the
  // job (the core shut down with the reason). First, each rank that left
  // saying it failed is named once, with what it said, while the job goes
  // on (waiting for a replacement; FinishIfDone fails the job without one).
  std::optional<int> CheckStepTimeouts(absl::Time now);
  // kExitRetryable when no worker has called (the core or the
  // coordinator) since `now` - no_worker_timeout and the job is
  // unfinished. Before any worker's first call the job has not begun:
  // never.
  std::optional<int> CheckWorkersGone(absl::Time now);
  // Once every worker has left (exit_when_done): kExitOk when the model is
  // saved, kExitFailure when it could not be or when a rank failed and no
  // replacement registered for it (the model is saved all the same).
  std::optional<int> FinishIfDone();

 private:
  // Of any worker's latest call (a registered rank's, or any call to the
  // coordinator); InfinitePast before the first.
  absl::Time LatestContact() const;
  // Logs the failures (FailedRanks) not logged yet.
  void ReportFailures();

  const Options options_;
  ParameterServer* const core_;       // Not owned.
  Checkpointer* const checkpointer_;  // Not owned; may be null.
  WeightsFileWriter* const weights_;  // Not owned; may be null.
  const DaemonLog log_;
  const ContactClock* const coordinator_;  // Not owned; may be null.
  std::map<int, std::string> reported_;  // Failures logged, by rank.
};

}  // namespace lockstep

#endif  // LOCKSTEP_SERVER_DAEMON_JOB_WATCHDOG_H_
