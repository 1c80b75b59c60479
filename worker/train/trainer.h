// The training loop of one worker.
//
// Trainer is a plain loop over the model and a StepSession (parameter
// servers or all-reduce; the session owns the step protocol and its
// rules): it joins the job, obtaining version 0 (rank 0's seeded initial
// weights), then for each step asks the session what to compute, sets the
// weights of version v, computes the gradient on this worker's shards of
// step v's examples, handing layers to the session as backprop finishes
// them, and lets the session exchange it for version v + 1. Batch-norm
// moving statistics travel with the gradient and come back as the
// workers' mean, so every replica evaluates alike. Rank 0 evaluates on the
// test set at the end (and after every epoch on request).
//
// Trainer wires two parts with their own tests: StepRunner (joining, and
// each step's batches, gradient and exchange; it owns the weights) and
// EpochReporter (each epoch's progress, step and epoch figures,
// validation and test evaluation). Trainer itself runs the epochs, counts
// the summary and leaves the job.
//
// Externally synchronized; the model, session and data are not owned.
#ifndef LOCKSTEP_WORKER_TRAIN_TRAINER_H_
#define LOCKSTEP_WORKER_TRAIN_TRAINER_H_

#include <cstdint>

#include "absl/status/statusor.h"
#include "absl/time/time.h"
#include "absl/types/span.h"
#include "worker/data/dataset.h"
#include "worker/data/sharded_sampler.h"
#include "worker/exchange/step_session.h"
#include "worker/model/model.h"
#include "worker/train/step_runner.h"
#include "worker/train/trainer_options.h"

namespace lockstep {

struct TrainSummary {
  double test_accuracy = -1;  // -1: not evaluated (ranks other than 0).
  double test_loss = -1;
  double train_loss = 0;  // Mean over this worker's batches, last epoch.
  double train_accuracy = 0;
  double examples_per_sec = 0;  // All workers' examples per second.
  int64_t steps = 0;            // Global steps this worker took part in.
  int64_t rejoins = 0;          // Times it registered again after a fault.
  bool stopped = false;         // Left early on request (SIGTERM).
  int64_t final_version = 0;
  double wall_seconds = 0;  // Training loop only.
  // The final Leave's outcome. A failed one (the servers or the
  // coordinator lost at the end) does not fail Run: the trained weights
  // are there to write; the caller reports it after.
  absl::Status left;
};

class Trainer final {
 public:
  Trainer(const TrainerOptions& options, Model* model, StepSession* session,
          const Dataset* train, const Dataset* test);

  absl::StatusOr<TrainSummary> Run();

  // The weights after Run (version final_version): parameters, then state.
  // Read them after Run and while the model lives: Run moves them into the
  // model's HostWeightBuffer() where it has one.
  absl::Span<const float> weights() const { return runner_.weights(); }

 private:
  // Trains from *step to the end of its epoch (or until a stop or a
  // rejoin), with the epoch's progress and evaluation.
  absl::Status RunEpoch(ShardedSampler* sampler, int64_t* step,
                        TrainSummary* summary);
  // Epochs this job runs: --max_steps may end it before --epochs.
  int Epochs(int64_t steps_per_epoch) const;
  // The final evaluation (rank 0) and leaving the job.
  absl::Status FinishJob(TrainSummary* summary);

  const TrainerOptions options_;
  Model* const model_;            // Not owned.
  StepSession* const session_;    // Not owned.
  const Dataset* const train_;    // Not owned.
  const Dataset* const test_;     // Not owned; may be null.
  StepRunner runner_;             // Over options_.
  int64_t total_steps_ = 0;       // Set by Run before joining.
  absl::Time loop_start_;         // When Run's first step began.
  absl::Duration training_time_;  // The epochs' time, evaluation excluded.
};

}  // namespace lockstep

#endif  // LOCKSTEP_WORKER_TRAIN_TRAINER_H_
