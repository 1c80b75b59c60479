// Exchanges gradients through the parameter-server shards (PS modes: sync,
// async, ssp). Each chunk is pushed as soon as backprop has it, and the
// replies are decoded into the weights as they arrive. The sync mode is
// the one the job's signature names at Join: in kSync steps are global
// (the version is the next step), in kAsync and kSsp each worker counts
// its own.
//
// An elastic job (kSync, --min_workers below --workers) goes on while at
// least the minimum of workers is there. They form a group at the
// coordinator (Coordinator.JoinGroup, group kPsGroupName) each time one
// joins or leaves; the step's global batch stays --workers shards, and the
// members cover the shards of absent ranks (BatchShards). Every push names
// its group's generation and its shard; the servers' barriers count shards
// and refuse older generations (ParameterServer::Push), which is how every
// member learns that the group re-forms. A shard's gradient depends only on
// the step's weights and its examples, never on who computes it, so the
// weights are those of a job with every worker. Externally synchronized.
#ifndef LOCKSTEP_WORKER_EXCHANGE_PS_EXCHANGER_H_
#define LOCKSTEP_WORKER_EXCHANGE_PS_EXCHANGER_H_

#include <atomic>
#include <memory>
#include <vector>

#include "common/group_membership.h"
#include "worker/exchange/allreduce/coordinator_client.h"
#include "worker/exchange/exchanger.h"
#include "worker/exchange/ps/ps_client.h"

namespace lockstep {

class PsExchanger final : public Exchanger {
 public:
  // `client` is not owned.
  PsExchanger(PsClient* client, int rank) : client_(client), rank_(rank) {}

  // An elastic job's worker: rank `rank` of `workers`, in groups that form
  // as `group` says at `coordinator` (owned), each wait for one bounded by
  // `rendezvous_timeout`. When `stop_requested` (not owned; may be null)
  // is set at Leave, the job is not done: absent ranks are not left for.
  struct Elastic {
    int workers = 1;
    GroupOptions group;
    absl::Duration rendezvous_timeout = absl::Seconds(60);
    std::unique_ptr<CoordinatorClient> coordinator;
    const std::atomic<bool>* stop_requested = nullptr;
  };
  PsExchanger(PsClient* client, int rank, Elastic elastic);

  absl::StatusOr<int64_t> Join(const ModelSignature& signature,
                               const std::function<std::vector<float>()>& initial,
                               absl::Span<float> weights,
                               absl::Duration timeout) override;
  absl::StatusOr<int64_t> Step(int64_t step, absl::Span<float> gradient,
                               absl::Span<float> weights,
                               const ComputeFn& compute,
                               BatchStats* stats) override;
  absl::Status Leave() override;
  bool CanRejoin() const override { return true; }
  absl::StatusOr<int64_t> NextStep(int64_t step,
                                   int64_t version) const override;
  int64_t StepAfterJoin(int64_t step, int64_t version) const override;
  std::vector<int> BatchShards(int /*rank*/) const override { return shards_; }
  bool SumsShardsLocally() const override { return false; }

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
  // Elastic: joins the group and sets the shards this worker pushes.
  absl::Status JoinGroup(const ModelSignature& signature, int64_t version,
                         absl::Duration timeout);

  PsClient* const client_;  // Not owned.
  const int rank_;
  Elastic elastic_;                 // coordinator null: not elastic.
  const uint64_t member_ = 0;       // Elastic: this process's group id.
  int64_t generation_ = 0;          // Of the group last joined.
  std::vector<int> members_;        // Its ranks.
  std::vector<int> shards_{rank_};  // The batch shards this worker pushes.
  SyncPolicy sync_;  // The job's, from the signature of the last Join.
  // The newest version this worker has pulled or stepped to. When it
  // registers again and a shard has no weights at all, the server lost
  // them (restarted without its checkpoint): initializing again would
  // silently start the job over, so Join refuses.
  int64_t seen_version_ = -1;
};

}  // namespace lockstep

#endif  // LOCKSTEP_WORKER_EXCHANGE_PS_EXCHANGER_H_
