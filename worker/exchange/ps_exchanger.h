// Exchanges gradients through the parameter-server shards (PS modes: sync,
// async, ssp). Each chunk is pushed as soon as backprop has it, and the
// replies are decoded into the weights as they arrive. The sync mode is
// the one the job's signature names at Join: in kSync steps are global
// (the version is the next step), in kAsync and kSsp each worker counts
// its own. Externally synchronized.
#ifndef LOCKSTEP_WORKER_EXCHANGE_PS_EXCHANGER_H_
#define LOCKSTEP_WORKER_EXCHANGE_PS_EXCHANGER_H_

#include "worker/exchange/exchanger.h"
#include "worker/exchange/ps/ps_client.h"

namespace lockstep {

class PsExchanger final : public Exchanger {
 public:
  // `client` is not owned.
  PsExchanger(PsClient* client, int rank) : client_(client), rank_(rank) {}

  absl::StatusOr<int64_t> Join(const ModelSignature& signature,
                               const std::function<std::vector<float>()>& initial,
                               absl::Span<float> weights,
                               absl::Duration timeout) override;
  absl::StatusOr<int64_t> Step(int64_t step, absl::Span<float> gradient,
                               absl::Span<float> weights,
                               const ComputeFn& compute,
                               BatchStats* stats) override;
  absl::Status Leave() override { return client_->Leave(); }
  bool CanRejoin() const override { return true; }
  absl::StatusOr<int64_t> NextStep(int64_t step,
                                   int64_t version) const override;
  int64_t StepAfterJoin(int64_t step, int64_t version) const override;

  // Step in pieces, for a caller whose backward pass runs outside (the
  // Python package, worker/python): BeginStep, GradientReady as ranges
  // become final, then FinishStep, or AbandonStep when the computation
  // failed. Step is these with `compute` in between.
  absl::Status BeginStep(int64_t step, absl::Span<const float> gradient,
                         absl::Span<float> weights) {
    return client_->BeginStep(step, gradient, weights);
  }
  void GradientReady(int64_t begin, int64_t end) {
    client_->GradientReady(begin, end);
  }
  void AbandonStep() { client_->AbandonStep(); }
  absl::StatusOr<int64_t> FinishStep();

 private:
  PsClient* const client_;  // Not owned.
  const int rank_;
  SyncPolicy sync_;  // The job's, from the signature of the last Join.
  // The newest version this worker has pulled or stepped to. When it
  // registers again and a shard has no weights at all, the server lost
  // them (restarted without its checkpoint): initializing again would
  // silently start the job over, so Join refuses.
  int64_t seen_version_ = -1;
};

}  // namespace lockstep

#endif  // LOCKSTEP_WORKER_EXCHANGE_PS_EXCHANGER_H_
