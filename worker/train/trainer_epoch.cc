// Trainer's epochs: the loop over one epoch's steps and what each step and
// each epoch report (progress, --step_log, the callback, validation).
#include <unistd.h>

#include <algorithm>
#include <cstdio>

#include "absl/time/clock.h"
#include "common/base/status_macros.h"
#include "worker/train/progress.h"
#include "worker/train/trainer.h"
#include "worker/train/training_callback.h"

namespace lockstep {

int Trainer::Epochs(int64_t steps_per_epoch) const {
  return static_cast<int>((total_steps_ + steps_per_epoch - 1) /
                          steps_per_epoch);
}

void Trainer::ReportStep(int64_t step, const BatchStats& stats,
                         const EpochTotals& totals, absl::Time* last_step_end) {
  const absl::Time now = options_.env->Now();
  const double step_seconds = absl::ToDoubleSeconds(now - *last_step_end);
  *last_step_end = now;
  if (stats.examples == 0) return;
  const double batch_loss = stats.loss_sum / stats.examples;
  if (options_.on_step) {
    options_.on_step(step, absl::ToDoubleSeconds(now - loop_start_),
                     batch_loss);
  }
  if (options_.callback == nullptr) return;
  StepLogs logs;
  logs.step = step + 1;
  logs.batch_loss = batch_loss;
  logs.batch_accuracy = static_cast<double>(stats.correct) / stats.examples;
  logs.loss = totals.loss();
  logs.accuracy = totals.accuracy();
  logs.step_seconds = step_seconds;
  logs.examples_per_sec = step_seconds > 0
                              ? static_cast<double>(options_.batch_size) *
                                    options_.num_workers / step_seconds
                              : 0;
  logs.learning_rate = LearningRateAt(options_.optimizer, step);
  options_.callback->OnStepEnd(logs);
}

absl::Status Trainer::RunEpoch(ShardedSampler* sampler,
                               std::vector<Batch>* batches, int64_t* step,
                               TrainSummary* summary) {
  const int64_t steps_per_epoch = sampler->StepsPerEpoch();
  const int epoch = static_cast<int>(*step / steps_per_epoch);
  const int64_t epoch_begin = epoch * steps_per_epoch;
  const int64_t epoch_end =
      std::min(total_steps_, epoch_begin + steps_per_epoch);
  EpochProgress progress(options_.progress, stdout, isatty(STDOUT_FILENO) != 0,
                         options_.env, epoch + 1, Epochs(steps_per_epoch),
                         epoch_end - epoch_begin);
  EpochTotals totals;
  const absl::Time epoch_start = options_.env->Now();
  absl::Time last_step_end = epoch_start;
  while (*step < epoch_end && !session_->Stopping()) {
    BatchStats stats;
    const int64_t trained = *step;  // The session plans the same step.
    absl::StatusOr<StepOutcome> stepped = TrainStep(sampler, batches, &stats);
    if (!stepped.ok()) {
      progress.EndBar();  // The failure gets a line of its own.
      return stepped.status();
    }
    const StepOutcome& outcome = *stepped;
    if (outcome.applied) {
      totals.loss_sum += stats.loss_sum;
      totals.correct += stats.correct;
      totals.seen += stats.examples;
      ReportStep(trained, stats, totals, &last_step_end);
      summary->final_version =
          std::max(summary->final_version, outcome.version);
      ++summary->steps;
    }
    if (outcome.stopped) {
      // A step failed after a stop signal (its servers may be draining or
      // gone): the run ends here. What is said about it gets a line of its
      // own.
      progress.EndBar();
      summary->stopped = true;
      break;
    }
    *step = outcome.next_step;
    if (outcome.rejoined) {
      // The session joined again (after a failed step, or as its group
      // changes): Run re-enters at the step's epoch.
      progress.EndBar();
      ++summary->rejoins;
      break;
    }
    progress.Update(std::min(*step, epoch_end) - epoch_begin, totals.loss(),
                    totals.accuracy());
  }
  const absl::Duration epoch_time = options_.env->Now() - epoch_start;
  training_time_ += epoch_time;
  summary->train_loss = totals.loss();
  summary->train_accuracy = totals.accuracy();
  if (*step < epoch_end) return absl::OkStatus();  // Interrupted: no summary.
  return EndEpoch(epoch, Epochs(steps_per_epoch), epoch_end, epoch_time, totals,
                  &progress);
}

absl::Status Trainer::EndEpoch(int epoch, int epochs, int64_t end,
                               absl::Duration epoch_time,
                               const EpochTotals& totals,
                               EpochProgress* progress) {
  EpochLogs logs;
  logs.epoch = epoch + 1;
  logs.step = end;
  logs.loss = totals.loss();
  logs.accuracy = totals.accuracy();
  const double epoch_steps =
      static_cast<double>(totals.seen) / options_.batch_size;
  logs.examples_per_sec = epoch_steps * options_.batch_size *
                          options_.num_workers /
                          std::max(1e-9, absl::ToDoubleSeconds(epoch_time));
  logs.learning_rate = LearningRateAt(options_.optimizer, end - 1);
  if (options_.validation != nullptr) {
    ASSIGN_OR_RETURN(const BatchStats val, Evaluate(*options_.validation));
    logs.has_validation = true;
    logs.val_loss = val.loss_sum / val.examples;
    logs.val_accuracy = static_cast<double>(val.correct) / val.examples;
  }
  progress->Finish({logs.loss, logs.accuracy, logs.examples_per_sec,
                    logs.has_validation, logs.val_loss, logs.val_accuracy});
  if (options_.callback != nullptr) options_.callback->OnEpochEnd(logs);
  if (options_.rank == 0 && test_ != nullptr && options_.eval_every_epoch &&
      end < total_steps_) {
    ASSIGN_OR_RETURN(const BatchStats eval, Evaluate(*test_));
    std::printf("Epoch %d/%d - test loss %.4f - test accuracy %.4f\n",
                epoch + 1, epochs, eval.loss_sum / eval.examples,
                static_cast<double>(eval.correct) / eval.examples);
    std::fflush(stdout);
  }
  return absl::OkStatus();
}

}  // namespace lockstep
