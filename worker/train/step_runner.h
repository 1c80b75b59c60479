// One worker's steps, as a StepSession plans them: StepRunner joins the
// job (obtaining version 0, rank 0's seeded initial weights, or the job's
// current version), and for each step gathers (and augments) this
// worker's shards of step v's examples, sleeps as --straggle asks, sets
// the weights of version v, computes the gradient, handing layers to the
// session as backprop finishes them where the plan streams, and lets the
// session exchange it for version v + 1. Batch-norm moving statistics
// travel with the gradient. It also evaluates the current weights.
//
// Owns the weights (parameters, then state: in the model's
// HostWeightBuffer() once adopted, so that the model's upload skips a
// copy, else its own vector; the session writes what it receives straight
// there), the batches and a second shard's gradient. The options, model,
// session and data are not owned and must outlive it. Externally
// synchronized.
#ifndef LOCKSTEP_WORKER_TRAIN_STEP_RUNNER_H_
#define LOCKSTEP_WORKER_TRAIN_STEP_RUNNER_H_

#include <cstdint>
#include <vector>

#include "absl/status/status.h"
#include "absl/status/statusor.h"
#include "absl/types/span.h"
#include "common/model/model_signature.h"
#include "worker/data/dataset.h"
#include "worker/data/sharded_sampler.h"
#include "worker/exchange/step_session.h"
#include "worker/model/model.h"
#include "worker/train/trainer_options.h"

namespace lockstep {

class StepRunner final {
 public:
  StepRunner(const TrainerOptions* options, Model* model, StepSession* session,
             const Dataset* train);

  // Adopts the model's own host buffer for the weights, where it lends
  // one. INVALID_ARGUMENT when options' initial weights do not fit the
  // model.
  absl::Status UseModelWeightBuffer();
  // The job's signature for a job of `total_steps`.
  ModelSignature Signature(int64_t total_steps) const;
  // Joins the job (the pull is timed like every step's); where that left
  // this worker.
  absl::StatusOr<StepOutcome> Join(int64_t total_steps);
  // The step the session plans next, from `sampler`'s batches; `*stats`
  // are this worker's figures of it (when computed).
  absl::StatusOr<StepOutcome> Step(ShardedSampler* sampler, BatchStats* stats);
  // Loads the weights into the model and evaluates it on `data`.
  absl::StatusOr<BatchStats> Evaluate(const Dataset& data);

  // Parameters, then state, of the last version received.
  absl::Span<const float> weights() const { return weights_; }

 private:
  struct Batch {  // One shard's examples, reused.
    std::vector<float> features;
    std::vector<int32_t> labels;
  };
  Batch NewBatch() const;
  // Sleeps as --straggle asks for this step.
  void Straggle(int64_t step) const;
  // Loads weights_ (parameters and state) into the model.
  absl::Status LoadModel();
  // One step's exchange: compute the gradient of the plan's shards and
  // receive the next weights.
  absl::StatusOr<StepOutcome> Exchange(const StepPlan& plan,
                                       absl::Span<const Batch> batches,
                                       BatchStats* stats);
  // The gradient (and state) of `batches` into the plan's gradient, and
  // their figures: summed, or one after the other (the plan says which).
  absl::StatusOr<BatchStats> ComputeShards(absl::Span<const Batch> batches,
                                           const StepPlan& plan,
                                           const Model::GradientReadyFn& ready);

  const TrainerOptions& options_;  // Not owned.
  Model* const model_;             // Not owned.
  StepSession* const session_;     // Not owned.
  const Dataset* const train_;     // Not owned.
  const int64_t num_parameters_;
  absl::Span<float> weights_;  // own_weights_ or the model's buffer.
  std::vector<float> own_weights_;
  std::vector<Batch> batches_;
  std::vector<float> shard_gradient_;  // A second shard's, to be summed.
};

}  // namespace lockstep

#endif  // LOCKSTEP_WORKER_TRAIN_STEP_RUNNER_H_
