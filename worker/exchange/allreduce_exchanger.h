// Exchanges gradients by all-reduce among the workers (--sync=allreduce):
// no server is in the data path (a server only hosts the rendezvous and
// sees the workers leave). Every worker sums the gradients (and state) with
// the others, divides by the worker count and applies the same optimizer to
// its own copy of the weights, so all replicas stay bit-identical (the
// backends give every rank the same sum). Externally synchronized.
#ifndef LOCKSTEP_WORKER_EXCHANGE_ALLREDUCE_EXCHANGER_H_
#define LOCKSTEP_WORKER_EXCHANGE_ALLREDUCE_EXCHANGER_H_

#include <atomic>
#include <memory>

#include "common/optimizer.h"
#include "worker/exchange/allreduce/all_reducer.h"
#include "worker/exchange/exchanger.h"
#include "worker/exchange/ps/ps_client.h"

namespace lockstep {

class AllReduceExchanger final : public Exchanger {
 public:
  // `reducer` is owned; `server` (for leaving the job, may be null) is not.
  // A stop is agreed between the ranks: each step carries whether this rank
  // was asked to stop (`stop_requested`, a signal handler's flag), summed
  // with the gradients, and when any was, every rank sets `stop_agreed`
  // after that same step (the trainer's stop flag). Either may be null.
  AllReduceExchanger(std::unique_ptr<AllReducer> reducer, PsClient* server,
                     int rank, int num_workers,
                     const std::atomic<bool>* stop_requested = nullptr,
                     std::atomic<bool>* stop_agreed = nullptr)
      : reducer_(std::move(reducer)),
        server_(server),
        rank_(rank),
        num_workers_(num_workers),
        stop_requested_(stop_requested),
        stop_agreed_(stop_agreed) {}

  absl::StatusOr<int64_t> Join(const ModelSignature& signature,
                               const std::function<std::vector<float>()>& initial,
                               absl::Span<float> weights,
                               absl::Duration timeout) override;
  absl::StatusOr<int64_t> Step(int64_t step, absl::Span<float> gradient,
                               absl::Span<float> weights,
                               const ComputeFn& compute,
                               BatchStats* stats) override;
  absl::Status Leave() override;
  bool CanRejoin() const override { return false; }
  // The stop flag travels after the gradient and state.
  int GradientTailSlots() const override { return 1; }

 private:
  std::unique_ptr<AllReducer> reducer_;
  PsClient* const server_;  // Not owned; may be null.
  const int rank_;
  const int num_workers_;
  const std::atomic<bool>* const stop_requested_;  // Not owned; may be null.
  std::atomic<bool>* const stop_agreed_;           // Not owned; may be null.
  std::unique_ptr<Optimizer> optimizer_;
  int64_t num_parameters_ = 0;
};

}  // namespace lockstep

#endif  // LOCKSTEP_WORKER_EXCHANGE_ALLREDUCE_EXCHANGER_H_
