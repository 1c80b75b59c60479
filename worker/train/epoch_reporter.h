// What one epoch of a worker's training tells: the progress bar or lines,
// --step_log's figures (TrainerOptions::on_step) and the callback's
// (history, TensorBoard, gauges) after each applied step, and at the
// epoch's end its final line, the validation figures (every rank, on
// TrainerOptions::validation) and, with --eval_every_epoch, rank 0's test
// evaluation before the last epoch.
//
// Owns the epoch's progress output and the running figures of its steps
// on this worker. The options (and the callback, Env and datasets they
// name) are not owned and must outlive it. Externally synchronized: one
// per epoch, on the training loop's thread.
#ifndef LOCKSTEP_WORKER_TRAIN_EPOCH_REPORTER_H_
#define LOCKSTEP_WORKER_TRAIN_EPOCH_REPORTER_H_

#include <cstdint>
#include <cstdio>
#include <functional>

#include "absl/status/status.h"
#include "absl/status/statusor.h"
#include "absl/time/time.h"
#include "worker/data/dataset.h"
#include "worker/model/model.h"
#include "worker/train/progress.h"
#include "worker/train/trainer_options.h"

namespace lockstep {

class EpochReporter final {
 public:
  // Evaluates the current weights on a data set.
  using EvaluateFn = std::function<absl::StatusOr<BatchStats>(const Dataset&)>;

  // Which epoch, in global steps.
  struct Epoch {
    int index = 0;  // From 0.
    int count = 1;  // Epochs in the job.
    int64_t begin = 0;
    int64_t end = 0;          // One past its last step.
    int64_t total_steps = 0;  // The job's: no test evaluation after the last.
  };

  // Prints the epoch's first line on `out` (not owned). `loop_start` is
  // when the training loop began (on options' Env); `test` (may be null)
  // is what rank 0 evaluates on.
  EpochReporter(const TrainerOptions* options, const Epoch& epoch,
                absl::Time loop_start, const Dataset* test, EvaluateFn evaluate,
                FILE* out = stdout);

  // Step `step` was applied with this worker's `stats`.
  void StepApplied(int64_t step, const BatchStats& stats);
  // The loop goes on at global step `next_step`: the bar follows.
  void Progress(int64_t next_step);
  // Ends a drawn bar's line (the epoch is left early, or a failure is
  // about to be said).
  void EndBar() { progress_.EndBar(); }
  // Since the epoch began.
  absl::Duration Elapsed() const;
  // The epoch ran to its end in `epoch_time`: validation, its final line,
  // the callback and rank 0's test evaluation.
  absl::Status End(absl::Duration epoch_time);

  // The running mean loss and accuracy of this worker's batches so far.
  double loss() const { return seen_ > 0 ? loss_sum_ / seen_ : 0; }
  double accuracy() const {
    return seen_ > 0 ? static_cast<double>(correct_) / seen_ : 0;
  }

 private:
  const TrainerOptions& options_;  // Not owned.
  const Epoch epoch_;
  const absl::Time loop_start_;
  const Dataset* const test_;  // Not owned; may be null.
  const EvaluateFn evaluate_;
  FILE* const out_;  // Not owned.
  EpochProgress progress_;
  const absl::Time epoch_start_;
  absl::Time last_step_end_;
  double loss_sum_ = 0;
  int64_t correct_ = 0;
  int64_t seen_ = 0;
};

}  // namespace lockstep

#endif  // LOCKSTEP_WORKER_TRAIN_EPOCH_REPORTER_H_
