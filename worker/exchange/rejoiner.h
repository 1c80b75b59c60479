// Registering again after a retryable failure (a restarted or draining
// server, a step given up, an eviction): exponential backoff with jitter,
// bounded by a deadline that counts from the last step that succeeded. The
// C++ Trainer and the Python package's client share it, so both recover
// alike (docs/faults.md).
//
// Externally synchronized (the training thread).
#ifndef LOCKSTEP_WORKER_EXCHANGE_REJOINER_H_
#define LOCKSTEP_WORKER_EXCHANGE_REJOINER_H_

#include <atomic>
#include <cstdint>
#include <functional>
#include <string>

#include "absl/status/statusor.h"
#include "absl/time/time.h"
#include "common/base/env.h"

namespace lockstep {

class Rejoiner final {
 public:
  // Registers once; `timeout` bounds the registration's wait.
  using JoinFn = std::function<absl::StatusOr<int64_t>(absl::Duration timeout)>;

  // `who` starts the line printed for each rejoin ("lockstep_worker 1");
  // `seed` and `rank` seed the jitter, so ranks back off apart;
  // `timeout_name` is what errors call the rejoin timeout (the setting a
  // user changes); `env` (not owned) is the clock of the deadline and
  // the backoff's sleeps.
  Rejoiner(std::string who, uint64_t seed, int rank,
           absl::Duration rejoin_timeout, std::string timeout_name,
           Env* env = Env::Default());

  // A step succeeded: the backoff starts over, the deadline counts from now.
  void StepSucceeded();
  // The time since the servers last answered (a step, or a rejoin) went
  // to training without them (a round's local steps): the deadline moves
  // on by that much, and the backoff stays as it is. Time spent in
  // failed pushes and rejoins still adds up, so a round whose push always
  // fails still gives up.
  void Progressed();

  // The step failed with retryable `cause`: OK while the deadline has not
  // passed, else `cause`'s code with a message saying nothing succeeded
  // within the rejoin timeout.
  absl::Status CheckDeadline(const absl::Status& cause) const;

  // Prints `cause`, then calls `join` with backoff and jitter until it
  // succeeds (returns its version), fails for good (its status), or the
  // deadline passes (the last failure, saying so).
  absl::StatusOr<int64_t> Rejoin(const absl::Status& cause, const JoinFn& join);

  int64_t rejoins() const { return rejoins_; }

  // Once `stop` (not owned; null: never) is set, a backoff's sleep ends
  // within kStopCheck and Rejoin returns CANCELLED: a stop signal is not
  // kept waiting by the backoff.
  void set_stop(const std::atomic<bool>* stop) { stop_ = stop; }

 private:
  static constexpr absl::Duration kFirstBackoff = absl::Milliseconds(100);
  static constexpr absl::Duration kMostBackoff = absl::Seconds(5);
  static constexpr absl::Duration kStopCheck = absl::Milliseconds(50);

  // Sleeps half to all of the backoff, then doubles it (up to kMostBackoff);
  // false when the stop was set meanwhile.
  bool Backoff(uint64_t jitter_seed);
  bool Stopped() const { return stop_ != nullptr && stop_->load(); }

  const std::string who_;
  const std::string timeout_name_;
  const uint64_t seed_;
  const int rank_;
  const absl::Duration rejoin_timeout_;
  Env* const env_;                           // Not owned.
  const std::atomic<bool>* stop_ = nullptr;  // Not owned.
  absl::Time last_success_;
  absl::Time last_answer_;  // A step succeeded, or a rejoin registered.
  absl::Duration backoff_ = kFirstBackoff;
  // A rejoin has registered and no step has succeeded since: the next one
  // backs off first (the step fails right after registering works, e.g. at
  // a draining server).
  bool rejoined_without_a_step_ = false;
  int64_t rejoins_ = 0;  // Also the jitter's stream.
};

}  // namespace lockstep

#endif  // LOCKSTEP_WORKER_EXCHANGE_REJOINER_H_
