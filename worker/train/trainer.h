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
// Externally synchronized; the model, session and data are not owned.
#ifndef LOCKSTEP_WORKER_TRAIN_TRAINER_H_
#define LOCKSTEP_WORKER_TRAIN_TRAINER_H_

#include <atomic>
#include <cstdint>
#include <functional>
#include <string>
#include <vector>

#include "absl/status/statusor.h"
#include "absl/time/time.h"
#include "common/base/env.h"
#include "common/model/chunk_plan.h"
#include "common/model/model_signature.h"
#include "worker/data/dataset.h"
#include "worker/data/image_data.h"
#include "worker/data/sharded_sampler.h"
#include "worker/exchange/step_session.h"
#include "worker/model/model.h"
#include "worker/train/progress.h"
#include "worker/train/step_observer.h"
#include "worker/train/training_callback.h"

namespace lockstep {

// How a worker's gradients meet the others'.
struct TrainerOptions {
  int rank = 0;
  int num_workers = 1;
  int num_shards = 1;
  int batch_size = 64;
  int epochs = 5;
  int64_t max_steps = 0;  // > 0: stop after this many global steps.
  uint64_t seed = 42;
  OptimizerConfig optimizer;
  // Version 0 when this worker defines it (parameters, then state), in
  // place of the model's seeded initializer; empty: the initializer.
  std::vector<float> initial_weights;
  int64_t chunk_bytes = kAutoChunkBytes;  // common/model/chunk_plan.h
  ProgressMode progress = ProgressMode::kLines;
  bool eval_every_epoch = false;
  // Held out of the training data (--validation_split) and evaluated by
  // every rank at the end of each epoch. Not owned; may be null.
  const Dataset* validation = nullptr;
  // Told each step's and each epoch's figures (history, TensorBoard,
  // gauges). Not owned; may be null.
  TrainingCallback* callback = nullptr;
  SyncMode sync = SyncMode::kSync;
  int backup_workers = 0;  // kSync: steps close after W - b pushes.
  int staleness = 0;       // kSsp.
  // Stragglers on purpose: a fixed delay per step, plus a random one drawn
  // uniformly from [0, straggle_random_ms] (seeded by seed, rank and step).
  int straggle_ms = 0;
  int straggle_random_ms = 0;
  // Told where each step's time goes (metrics, traces). Not owned; may be
  // null.
  StepObserver* observer = nullptr;
  // Image models: random crops and flips (seeded by seed, step and example).
  ImageAugmentation augmentation;
  ImageSize image_size;
  // Called after each step this worker completes, with that step, the
  // seconds since the training loop began and the step's mean batch loss:
  // what loss-against-time curves need (--step_log). May be empty.
  std::function<void(int64_t step, double seconds, double loss)> on_step;
  // The clock of the loop's times (on_step, the epochs' rates, the
  // summary) and of its sleeps (straggling); the
  // observer's phases are timed on the real clock, as its metrics and
  // traces are. Not owned.
  Env* env = Env::Default();
};

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
};

class Trainer final {
 public:
  Trainer(const TrainerOptions& options, Model* model, StepSession* session,
          const Dataset* train, const Dataset* test);

  absl::StatusOr<TrainSummary> Run();

  // The weights after Run (version final_version): parameters, then state.
  // Read them after Run and while the model lives: Run moves them into the
  // model's HostWeightBuffer() where it has one.
  absl::Span<const float> weights() const { return weights_; }

 private:
  absl::StatusOr<StepOutcome> JoinJob();
  struct Batch {  // One shard's examples, reused.
    std::vector<float> features;
    std::vector<int32_t> labels;
  };
  Batch NewBatch() const;
  // One step's exchange: compute the gradient of the plan's shards
  // (handing each layer to the session as it is ready, where the plan
  // streams) and receive the next weights.
  absl::StatusOr<StepOutcome> Exchange(const StepPlan& plan,
                                       absl::Span<const Batch> batches,
                                       BatchStats* stats);
  // The gradient (and state) of `batches` into the plan's gradient, and
  // their figures: summed, or one after the other (the plan says which).
  absl::StatusOr<BatchStats> ComputeShards(absl::Span<const Batch> batches,
                                           const StepPlan& plan,
                                           const Model::GradientReadyFn& ready);
  // Loads weights_ (parameters and state) into the model.
  absl::Status LoadModel();
  ModelSignature Signature() const;
  // Sleeps as --straggle asks for this step.
  void Straggle(int64_t step) const;
  // Loads the weights into the model and evaluates it on `data`.
  absl::StatusOr<BatchStats> Evaluate(const Dataset& data);

  // Run's parts, in order.
  // Adopts the model's own host buffer for the weights, where it lends one.
  absl::Status UseModelWeightBuffer();
  // Gathers (and augments) this worker's shards of the step the session
  // plans and exchanges their gradient; where that left this worker.
  absl::StatusOr<StepOutcome> TrainStep(ShardedSampler* sampler,
                                        std::vector<Batch>* batches,
                                        BatchStats* stats);
  // Trains from *step to the end of its epoch (or until a stop or a
  // rejoin), with the epoch's progress and evaluation.
  absl::Status RunEpoch(ShardedSampler* sampler, std::vector<Batch>* batches,
                        int64_t* step, TrainSummary* summary);
  // The running figures of one epoch's steps on this worker.
  struct EpochTotals {
    double loss_sum = 0;
    int64_t correct = 0;
    int64_t seen = 0;
    double loss() const { return seen > 0 ? loss_sum / seen : 0; }
    double accuracy() const {
      return seen > 0 ? static_cast<double>(correct) / seen : 0;
    }
  };
  // After step `step` succeeded: --step_log's line and the callback's.
  void ReportStep(int64_t step, const BatchStats& stats,
                  const EpochTotals& totals, absl::Time* last_step_end);
  // Epoch `epoch` (from 0) of `epochs` ran to its end (global step `end`):
  // validation, its final progress line, the callback, and rank 0's test
  // evaluation.
  absl::Status EndEpoch(int epoch, int epochs, int64_t end,
                        absl::Duration epoch_time, const EpochTotals& totals,
                        EpochProgress* progress);
  // Epochs this job runs: --max_steps may end it before --epochs.
  int Epochs(int64_t steps_per_epoch) const;
  // The final evaluation (rank 0) and leaving the job.
  absl::Status FinishJob(TrainSummary* summary);

  const TrainerOptions options_;
  Model* const model_;          // Not owned.
  StepSession* const session_;  // Not owned.
  const int64_t num_parameters_;
  const Dataset* const train_;  // Not owned.
  const Dataset* const test_;   // Not owned; may be null.
  // Parameters, then state: in the model's HostWeightBuffer() where it has
  // one (its upload then skips a copy), else in own_weights_. The session
  // writes the weights it receives straight here.
  absl::Span<float> weights_;
  std::vector<float> own_weights_;
  std::vector<float> shard_gradient_;  // A second shard's, to be summed.
  int64_t total_steps_ = 0;            // Set by Run before joining.
  absl::Time loop_start_;              // When Run's first step began.
  absl::Duration training_time_;       // The epochs' time, evaluation excluded.
};

}  // namespace lockstep

#endif  // LOCKSTEP_WORKER_TRAIN_TRAINER_H_
