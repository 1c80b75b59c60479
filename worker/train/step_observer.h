// What a worker's training loop tells metrics and traces (worker/
// worker_telemetry.h) about where each step's time goes.
//
// The phases of one synchronous step (PS mode), in order:
//   pull     the weights received for this step are loaded into the model
//            (and, when joining, the Pull RPCs that fetch them);
//   compute  forward and backward pass; the pushes below run inside it, as
//            backprop finishes each layer;
//   push     encoding and sending the gradient chunks that became ready
//            (with --push_thread, only handing them to the push thread,
//            worker/exchange/ps/push_thread.h);
//   wait     FinishStep: sending what is left and waiting for the replies
//            (the server's barrier, its optimizer, the transfers).
// The observer is called on the training thread; implementations must be
// cheap. PhaseTimer reads no clock when there is no observer.
#ifndef LOCKSTEP_WORKER_TRAIN_STEP_OBSERVER_H_
#define LOCKSTEP_WORKER_TRAIN_STEP_OBSERVER_H_

#include <cstdint>

#include "absl/time/clock.h"
#include "absl/time/time.h"

namespace lockstep {

class StepObserver {
 public:
  enum class Phase { kPull, kCompute, kPush, kWait };

  virtual ~StepObserver() = default;
  // A phase of `step` ran from `start` to `end`.
  virtual void OnPhase(Phase phase, int64_t step, absl::Time start,
                       absl::Time end) = 0;
  // Step `step` ran from `start` to `end` and was answered with `version`.
  virtual void OnStep(int64_t step, int64_t version, absl::Time start,
                      absl::Time end) = 0;
};

// Times from construction to Stop() (or destruction) as one phase.
class PhaseTimer final {
 public:
  PhaseTimer(StepObserver* observer, StepObserver::Phase phase, int64_t step)
      : observer_(observer), phase_(phase), step_(step) {
    if (observer_ != nullptr) start_ = absl::Now();
  }
  ~PhaseTimer() { Stop(); }
  PhaseTimer(const PhaseTimer&) = delete;
  PhaseTimer& operator=(const PhaseTimer&) = delete;

  void Stop() {
    if (observer_ == nullptr) return;
    observer_->OnPhase(phase_, step_, start_, absl::Now());
    observer_ = nullptr;
  }

 private:
  StepObserver* observer_;  // Not owned; null: nothing to do.
  const StepObserver::Phase phase_;
  const int64_t step_;
  absl::Time start_;
};

}  // namespace lockstep

#endif  // LOCKSTEP_WORKER_TRAIN_STEP_OBSERVER_H_
