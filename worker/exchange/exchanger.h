// How a worker's gradients meet the other workers' each step: through the
// parameter servers (PsExchanger) or by all-reduce among the workers
// (AllReduceExchanger). The Trainer owns the data loop; an Exchanger owns
// the job's membership, the step's exchange and the sync semantics: which
// step a worker trains next, given the versions it is answered with.
//
// Vectors are the flat layout of the model signature: the trainable
// parameters, then the model's state (batch-norm moving statistics). In a
// step the gradient vector carries the mean gradient of the batch for the
// parameters and this worker's updated state for the state; the weights
// vector receives the next parameters and the workers' mean state.
//
// Implementations are externally synchronized (the training thread).
#ifndef LOCKSTEP_WORKER_EXCHANGE_EXCHANGER_H_
#define LOCKSTEP_WORKER_EXCHANGE_EXCHANGER_H_

#include <cstdint>
#include <functional>
#include <vector>

#include "absl/status/statusor.h"
#include "absl/time/time.h"
#include "absl/types/span.h"
#include "common/model_signature.h"
#include "worker/model/model.h"

namespace lockstep {

class Exchanger {
 public:
  virtual ~Exchanger() = default;

  // Computes the step's gradient into the gradient vector; calls on_ready as
  // ranges of it become final (it may be null).
  using ComputeFn =
      std::function<absl::StatusOr<BatchStats>(const Model::GradientReadyFn&)>;

  // Joins the job and fills `weights` with the version to start from, which
  // it returns. `initial` makes version 0 when this process defines it.
  virtual absl::StatusOr<int64_t> Join(
      const ModelSignature& signature,
      const std::function<std::vector<float>()>& initial,
      absl::Span<float> weights, absl::Duration timeout) = 0;

  // One step: runs `compute`, exchanges, and leaves the next weights in
  // `weights`. Returns their version.
  virtual absl::StatusOr<int64_t> Step(int64_t step, absl::Span<float> gradient,
                                       absl::Span<float> weights,
                                       const ComputeFn& compute,
                                       BatchStats* stats) = 0;

  // Says this worker is done.
  virtual absl::Status Leave() = 0;

  // Whether Join may be called again after a retryable failure.
  virtual bool CanRejoin() const = 0;

  // Floats the exchanger may use after the gradient and the state in the
  // vector Step gets (which is that much longer than `weights`).
  virtual int GradientTailSlots() const { return 0; }

  // The step this worker trains after `step`, which Step answered with
  // `version`; an error when the answer breaks the sync mode's rules. By
  // default steps are the job's global steps: the version is the next.
  virtual absl::StatusOr<int64_t> NextStep(int64_t step,
                                           int64_t version) const {
    return version;
  }

  // The shards of the step's global batch (one --batch_size batch each, of
  // --workers) that rank `rank` computes at its next step: its own, unless
  // the job goes on with fewer workers (AllReduceExchanger).
  virtual std::vector<int> BatchShards(int rank) const { return {rank}; }

  // Whether a worker computing several shards sums their gradients into
  // the one Step exchanges (all-reduce). Otherwise (an elastic PS job,
  // whose barriers count shards) Step gets each shard's after the other:
  // n floats apiece, n the weights' size, in BatchShards' order.
  virtual bool SumsShardsLocally() const { return true; }

  // After a step that succeeded: whether this worker must Join again
  // before the next (its group changes at this step boundary).
  virtual bool WantsRejoin() const { return false; }

  // The step this worker trains after Join returned `version`, having got
  // to `step` before (0 at the start). By default: the version.
  virtual int64_t StepAfterJoin(int64_t step, int64_t version) const {
    return version;
  }
};

}  // namespace lockstep

#endif  // LOCKSTEP_WORKER_EXCHANGE_EXCHANGER_H_
