// Times a worker's own steps into the StepReport its next pushes carry
// (common/rpc/step_report.h), from the calls a step session sees: the
// previous step's end, the trainer's word that the batch is ready (where
// it gives one), each hand-off of gradient ranges, FinishStep's start and
// its end, and the client's count of the encoding. Not thread-safe: the
// training thread's.
#ifndef LOCKSTEP_WORKER_EXCHANGE_STEP_REPORT_CLOCK_H_
#define LOCKSTEP_WORKER_EXCHANGE_STEP_REPORT_CLOCK_H_

#include <algorithm>
#include <cstdint>

#include "absl/time/time.h"
#include "common/rpc/step_report.h"

namespace lockstep {

class StepReportClock final {
 public:
  // The next step starts now (after Join, or a rejoin).
  void Restart(absl::Time now) {
    start_ = now;
    input_ready_ = absl::InfinitePast();
    pushing_ = absl::ZeroDuration();
    finish_called_ = absl::InfinitePast();
    input_before_ = compute_before_ = absl::ZeroDuration();
  }
  // Work of this step done before it started (a round's earlier local
  // steps): counted with its own input and compute.
  void WorkBefore(absl::Duration input, absl::Duration compute) {
    input_before_ += input;
    compute_before_ += compute;
  }
  // The step's batch is ready: what came before was input.
  void InputReady(absl::Time now) { input_ready_ = now; }
  // A hand-off of gradient ranges took `took` (inside compute).
  void Pushed(absl::Duration took) { pushing_ += took; }
  // FinishStep began: the backward pass is over.
  void Finishing(absl::Time now) { finish_called_ = now; }
  // The step ended at `now` with its last reply, having spent `encoding`
  // encoding and starting its pushes on any thread (the client's own
  // count: the push thread's and FinishStep's too); returns its report and
  // starts the next step. The encoding beyond the hand-offs is taken out
  // of the wait.
  StepReport Finished(int64_t step, absl::Time now,
                      absl::Duration encoding = absl::ZeroDuration()) {
    StepReport r;
    r.step = step;
    const absl::Time compute_from =
        input_ready_ == absl::InfinitePast() ? start_ : input_ready_;
    const absl::Time compute_to =
        finish_called_ == absl::InfinitePast() ? now : finish_called_;
    const absl::Duration push = std::max(encoding, pushing_);
    r.input_us =
        absl::ToInt64Microseconds(compute_from - start_ + input_before_);
    r.push_us = absl::ToInt64Microseconds(push);
    r.compute_us = absl::ToInt64Microseconds(compute_to - compute_from -
                                             pushing_ + compute_before_);
    r.wait_us = absl::ToInt64Microseconds(std::max(
        now - compute_to - (push - pushing_), absl::ZeroDuration()));
    Restart(now);
    return r;
  }

 private:
  absl::Time start_ = absl::InfinitePast();
  absl::Time input_ready_ = absl::InfinitePast();
  absl::Time finish_called_ = absl::InfinitePast();
  absl::Duration pushing_;
  absl::Duration input_before_, compute_before_;
};

}  // namespace lockstep

#endif  // LOCKSTEP_WORKER_EXCHANGE_STEP_REPORT_CLOCK_H_
