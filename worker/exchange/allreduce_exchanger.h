// Exchanges gradients by all-reduce among the workers (--sync=allreduce):
// no server is in the data path (a server only hosts the rendezvous and
// sees the workers leave). Every worker sums the gradients (and state) with
// the others, divides by the worker count and applies the same optimizer to
// its own copy of the weights, so all replicas stay bit-identical (the
// backends give every rank the same sum).
//
// Peers lost mid-job are survived at step granularity. A step whose
// collective fails applies nothing on this rank; the trainer then joins
// again (Join, through its Rejoiner's backoff and deadline), and the group
// re-forms at the coordinator (Coordinator.JoinGroup) from the ranks still
// alive and the replacements of the lost ones, as a new generation with
// reducers of its own. The group goes on from the highest version any member
// holds: a step that completed on some rank before the failure is kept
// (every rank that applied it applied the same full sum), one that did not
// is redone. Members behind that version (a replacement, or a rank whose
// step failed where another's completed) receive the weights, the model's
// state and the optimizer's state from a member at that version, bit for
// bit, before training on. So a job that lost and replaced ranks ends with
// the weights of a job that lost none.
//
// Elastic jobs (GroupOptions::min_workers below --workers) go on with
// fewer ranks. The global batch stays --workers shards of --batch_size
// examples, each step the same examples as in a full job: the W members
// present split the shards (the member at index i computes shards i, i + W,
// ..., summing their gradients as gradient accumulation does), and the sum
// is divided by the shard count. So an epoch's examples are covered
// exactly, none twice, whatever W is at each step; a smaller group's steps
// only take longer. Members join and leave at step boundaries: a group with
// a rank missing watches the coordinator for joiners (WatchGroup) and
// re-forms after the step in which one is seen; a rank told to stop leaves
// after its step while the others re-form, as long as at least
// min_workers remain (else every rank stops, as in a fixed job). A group
// that loses a rank re-forms with those left once min_workers have joined
// and GroupOptions::settle has passed. Externally synchronized.
#ifndef LOCKSTEP_WORKER_EXCHANGE_ALLREDUCE_EXCHANGER_H_
#define LOCKSTEP_WORKER_EXCHANGE_ALLREDUCE_EXCHANGER_H_

#include <atomic>
#include <functional>
#include <memory>
#include <thread>
#include <vector>

#include "absl/base/thread_annotations.h"
#include "absl/synchronization/mutex.h"
#include "common/group_membership.h"
#include "common/optimizer.h"
#include "worker/exchange/allreduce/all_reducer.h"
#include "worker/exchange/allreduce/coordinator_client.h"
#include "worker/exchange/exchanger.h"
#include "worker/exchange/ps/ps_client.h"

namespace lockstep {

class AllReduceExchanger final : public Exchanger {
 public:
  using ReducerFactory =
      std::function<absl::StatusOr<std::unique_ptr<AllReducer>>(
          const AllReduceOptions&)>;

  // `options` describe this rank and the job's group (options.group is the
  // prefix of every generation's keys; options.size is --workers, the
  // shards of each step), `group` how it forms. `coordinator` (owned) forms the
  // groups; it may be null only when options.size is 1. `server` (for
  // leaving the job, may be null) is not owned. A stop is agreed between
  // the ranks: each step carries whether this rank was asked to stop
  // (`stop_requested`, a signal handler's flag), summed with the gradients,
  // and when any was, every rank sets `stop_agreed` after that same step
  // (the trainer's stop flag). Either may be null. `create` makes each
  // generation's reducer (tests pass their own).
  AllReduceExchanger(AllReduceOptions options, GroupOptions group,
                     std::unique_ptr<CoordinatorClient> coordinator,
                     PsClient* server,
                     const std::atomic<bool>* stop_requested = nullptr,
                     std::atomic<bool>* stop_agreed = nullptr,
                     ReducerFactory create = CreateAllReducer);

  absl::StatusOr<int64_t> Join(const ModelSignature& signature,
                               const std::function<std::vector<float>()>& initial,
                               absl::Span<float> weights,
                               absl::Duration timeout) override;
  absl::StatusOr<int64_t> Step(int64_t step, absl::Span<float> gradient,
                               absl::Span<float> weights,
                               const ComputeFn& compute,
                               BatchStats* stats) override;
  absl::Status Leave() override;
  // A group of more than one rank re-forms after a lost peer.
  bool CanRejoin() const override { return options_.size > 1; }
  // The stop flag and the joiners' flag travel after the gradient and
  // state.
  int GradientTailSlots() const override { return 2; }
  std::vector<int> BatchShards(int rank) const override;
  bool WantsRejoin() const override { return regroup_; }

  ~AllReduceExchanger() override;

  // The generation of the group this rank trains in (0 before the first
  // Join, and always with one rank).
  int64_t generation() const { return generation_; }

 private:
  // The first Join's part: the optimizer and version 0.
  absl::Status Start(const ModelSignature& signature,
                     const std::function<std::vector<float>()>& initial,
                     absl::Span<float> weights);
  // Joins the coordinator's forming group, waiting at most `timeout` and
  // the rendezvous timeout.
  absl::StatusOr<CoordinatorClient::Group> JoinGroup(absl::Duration timeout);
  // Sends (`send`) or receives the weights and the optimizer's state with
  // one sum in which every other rank adds -0.0, which leaves each value's
  // bits unchanged.
  absl::Status ShareState(bool send, absl::Span<float> weights);
  // What the step's summed tail says: stops agreed, leaves, a re-forming.
  void AfterStep(float stops, float joiners);
  bool Elastic() const {
    return group_.min_workers > 0 && group_.min_workers < options_.size;
  }
  // The joiners' watch, run by the member at index 0 of a group missing a
  // rank; StopWatch ends it.
  void StartWatch();
  void StopWatch();
  void Watch(int64_t generation);

  const AllReduceOptions options_;
  const GroupOptions group_;
  const std::unique_ptr<CoordinatorClient> coordinator_;  // May be null.
  PsClient* const server_;                         // Not owned; may be null.
  const std::atomic<bool>* const stop_requested_;  // Not owned; may be null.
  std::atomic<bool>* const stop_agreed_;           // Not owned; may be null.
  const ReducerFactory create_;
  const uint64_t member_;  // This process's id at the coordinator.
  std::string signature_;  // The model's, serialized, for the coordinator.
  std::unique_ptr<AllReducer> reducer_;  // The current generation's.
  std::unique_ptr<Optimizer> optimizer_;
  int64_t num_parameters_ = 0;
  int64_t version_ = 0;  // Steps applied to the weights.
  int64_t generation_ = 0;
  int index_ = 0;                    // This rank's place in the group.
  std::vector<int> members_;         // The group's ranks, ascending.
  bool regroup_ = false;             // Re-form before the next step.
  bool stop_sent_ = false;           // This rank's stop flag in the last step.
  std::vector<float> state_buffer_;  // ShareState's.
  std::thread watch_;
  std::atomic<bool> joiner_seen_{false};
  absl::Mutex watch_mu_;
  bool watch_stop_ ABSL_GUARDED_BY(watch_mu_) = false;
};

}  // namespace lockstep

#endif  // LOCKSTEP_WORKER_EXCHANGE_ALLREDUCE_EXCHANGER_H_
