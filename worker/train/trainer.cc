#include "worker/train/trainer.h"

#include <algorithm>
#include <cstdio>

#include "absl/strings/str_cat.h"
#include "common/base/status_macros.h"
#include "worker/train/epoch_reporter.h"

namespace lockstep {

Trainer::Trainer(const TrainerOptions& options, Model* model,
                 StepSession* session, const Dataset* train,
                 const Dataset* test)
    : options_(options),
      model_(model),
      session_(session),
      train_(train),
      test_(test),
      runner_(&options_, model, session, train) {}

int Trainer::Epochs(int64_t steps_per_epoch) const {
  return static_cast<int>((total_steps_ + steps_per_epoch - 1) /
                          steps_per_epoch);
}

absl::Status Trainer::RunEpoch(ShardedSampler* sampler, int64_t* step,
                               TrainSummary* summary) {
  const int64_t steps_per_epoch = sampler->StepsPerEpoch();
  EpochReporter::Epoch epoch;
  epoch.index = static_cast<int>(*step / steps_per_epoch);
  epoch.count = Epochs(steps_per_epoch);
  epoch.begin = epoch.index * steps_per_epoch;
  epoch.end = std::min(total_steps_, epoch.begin + steps_per_epoch);
  epoch.total_steps = total_steps_;
  EpochReporter reporter(
      &options_, epoch, loop_start_, test_,
      [this](const Dataset& data) { return runner_.Evaluate(data); });
  while (*step < epoch.end && !session_->Stopping()) {
    BatchStats stats;
    const int64_t trained = *step;  // The session plans the same step.
    absl::StatusOr<StepOutcome> stepped = runner_.Step(sampler, &stats);
    if (!stepped.ok()) {
      reporter.EndBar();  // The failure gets a line of its own.
      return stepped.status();
    }
    const StepOutcome& outcome = *stepped;
    if (outcome.applied) {
      reporter.StepApplied(trained, stats);
      summary->final_version =
          std::max(summary->final_version, outcome.version);
      ++summary->steps;
    }
    if (outcome.stopped) {
      // A step failed after a stop signal (its servers may be draining or
      // gone): the run ends here. What is said about it gets a line of its
      // own.
      reporter.EndBar();
      summary->stopped = true;
      break;
    }
    *step = outcome.next_step;
    if (outcome.rejoined) {
      // The session joined again (after a failed step, or as its group
      // changes): Run re-enters at the step's epoch.
      reporter.EndBar();
      ++summary->rejoins;
      break;
    }
    reporter.Progress(*step);
  }
  const absl::Duration epoch_time = reporter.Elapsed();
  training_time_ += epoch_time;
  summary->train_loss = reporter.loss();
  summary->train_accuracy = reporter.accuracy();
  if (*step < epoch.end) return absl::OkStatus();  // Interrupted: no summary.
  return reporter.End(epoch_time);
}

absl::Status Trainer::FinishJob(TrainSummary* summary) {
  if (options_.rank == 0 && test_ != nullptr && !summary->stopped) {
    absl::StatusOr<BatchStats> eval = runner_.Evaluate(*test_);
    if (!eval.ok()) {
      // The job is done either way: leave it (so that the servers can
      // finish), then report.
      session_
          ->Leave(LeaveNote{LeaveReason::kFailed,
                            std::string(eval.status().message())})
          .IgnoreError();
      return eval.status();
    }
    summary->test_loss = eval->loss_sum / eval->examples;
    summary->test_accuracy =
        static_cast<double>(eval->correct) / eval->examples;
  }
  absl::Status left = session_->Leave(LeaveNote{
      summary->stopped ? LeaveReason::kStopped : LeaveReason::kFinished, ""});
  if (!left.ok() && summary->stopped) {
    // Stopped by a signal that may well have stopped the servers too:
    // leaving is a courtesy then, not a failure.
    std::fprintf(stderr, "lockstep_worker %d: could not leave the job: %s\n",
                 options_.rank, left.ToString().c_str());
    return absl::OkStatus();
  }
  summary->left = left;
  return absl::OkStatus();
}

absl::StatusOr<TrainSummary> Trainer::Run() {
  ASSIGN_OR_RETURN(ShardedSampler sampler,
                   ShardedSampler::Create(train_->num_examples,
                                          options_.num_workers, options_.rank,
                                          options_.batch_size, options_.seed));
  total_steps_ = sampler.StepsPerEpoch() * options_.epochs;
  if (options_.max_steps > 0) {
    total_steps_ = std::min(total_steps_, options_.max_steps);
  }
  RETURN_IF_ERROR(runner_.UseModelWeightBuffer());
  ASSIGN_OR_RETURN(const StepOutcome joined, runner_.Join(total_steps_));
  int64_t step = joined.next_step;
  const int64_t dim = model_->FeatureSize();
  if (train_->feature_dim != dim) {
    return absl::InvalidArgumentError(
        absl::StrCat("the data has ", train_->feature_dim,
                     " values per example, the model "
                     "takes ",
                     dim));
  }

  TrainSummary summary;
  summary.final_version = joined.version;
  loop_start_ = options_.env->Now();
  training_time_ = absl::ZeroDuration();
  while (step < total_steps_ && !summary.stopped) {
    if (session_->Stopping()) {
      summary.stopped = true;
      break;
    }
    RETURN_IF_ERROR(RunEpoch(&sampler, &step, &summary));
  }
  summary.wall_seconds = absl::ToDoubleSeconds(training_time_);
  summary.examples_per_sec =
      summary.wall_seconds > 0
          ? summary.steps * static_cast<double>(options_.batch_size) *
                options_.num_workers / summary.wall_seconds
          : 0;
  RETURN_IF_ERROR(FinishJob(&summary));
  return summary;
}

}  // namespace lockstep
