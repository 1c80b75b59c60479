#include "worker/train/epoch_reporter.h"

#include <unistd.h>

#include <algorithm>
#include <utility>

#include "common/base/status_macros.h"
#include "worker/train/training_callback.h"

namespace lockstep {

EpochReporter::EpochReporter(const TrainerOptions* options, const Epoch& epoch,
                             absl::Time loop_start, const Dataset* test,
                             EvaluateFn evaluate, FILE* out)
    : options_(*options),
      epoch_(epoch),
      loop_start_(loop_start),
      test_(test),
      evaluate_(std::move(evaluate)),
      out_(out),
      progress_(options->progress, out, isatty(fileno(out)) != 0, options->env,
                epoch.index + 1, epoch.count, epoch.end - epoch.begin),
      epoch_start_(options->env->Now()),
      last_step_end_(epoch_start_) {}

void EpochReporter::StepApplied(int64_t step, const BatchStats& stats) {
  loss_sum_ += stats.loss_sum;
  correct_ += stats.correct;
  seen_ += stats.examples;
  const absl::Time now = options_.env->Now();
  const double step_seconds = absl::ToDoubleSeconds(now - last_step_end_);
  last_step_end_ = now;
  if (stats.examples == 0) return;
  const double batch_loss = stats.loss_sum / stats.examples;
  if (options_.on_step) {
    options_.on_step(step, absl::ToDoubleSeconds(now - loop_start_),
                     batch_loss);
  }
  if (options_.callback == nullptr) return;
  StepLogs logs;
  logs.step = step + 1;
  logs.total_steps = epoch_.total_steps;
  logs.epoch = epoch_.index + 1;
  logs.epochs = epoch_.count;
  logs.batch_loss = batch_loss;
  logs.batch_accuracy = static_cast<double>(stats.correct) / stats.examples;
  logs.loss = loss();
  logs.accuracy = accuracy();
  logs.step_seconds = step_seconds;
  logs.examples_per_sec = step_seconds > 0
                              ? static_cast<double>(options_.batch_size) *
                                    options_.num_workers / step_seconds
                              : 0;
  logs.learning_rate = LearningRateAt(options_.optimizer, step);
  options_.callback->OnStepEnd(logs);
}

void EpochReporter::Progress(int64_t next_step) {
  progress_.Update(std::min(next_step, epoch_.end) - epoch_.begin, loss(),
                   accuracy());
}

absl::Duration EpochReporter::Elapsed() const {
  return options_.env->Now() - epoch_start_;
}

absl::Status EpochReporter::End(absl::Duration epoch_time) {
  EpochLogs logs;
  logs.epoch = epoch_.index + 1;
  logs.step = epoch_.end;
  logs.loss = loss();
  logs.accuracy = accuracy();
  const double epoch_steps = static_cast<double>(seen_) / options_.batch_size;
  logs.examples_per_sec = epoch_steps * options_.batch_size *
                          options_.num_workers /
                          std::max(1e-9, absl::ToDoubleSeconds(epoch_time));
  logs.learning_rate = LearningRateAt(options_.optimizer, epoch_.end - 1);
  if (options_.validation != nullptr) {
    ASSIGN_OR_RETURN(const BatchStats val, evaluate_(*options_.validation));
    logs.has_validation = true;
    logs.val_loss = val.loss_sum / val.examples;
    logs.val_accuracy = static_cast<double>(val.correct) / val.examples;
  }
  progress_.Finish({logs.loss, logs.accuracy, logs.examples_per_sec,
                    logs.has_validation, logs.val_loss, logs.val_accuracy});
  if (options_.callback != nullptr) options_.callback->OnEpochEnd(logs);
  if (options_.rank == 0 && test_ != nullptr && options_.eval_every_epoch &&
      epoch_.end < epoch_.total_steps) {
    ASSIGN_OR_RETURN(const BatchStats eval, evaluate_(*test_));
    std::fprintf(out_, "Epoch %d/%d - test loss %.4f - test accuracy %.4f\n",
                 epoch_.index + 1, epoch_.count, eval.loss_sum / eval.examples,
                 static_cast<double>(eval.correct) / eval.examples);
    std::fflush(out_);
  }
  return absl::OkStatus();
}

}  // namespace lockstep
