// The step session of --sync=allreduce: no server is in the data path (a
// server only hosts the rendezvous and sees the workers leave). Every
// worker sums the gradients (and state) with the others, divides by the
// worker count and applies the same optimizer to its own copy of the
// weights, so all replicas stay bit-identical (the backends give every
// rank the same sum).
//
// Peers lost mid-job are survived at step granularity. A step whose
// collective fails applies nothing on this rank; the session then joins
// again (StepRecovery's backoff and deadline), and the group re-forms at
// the coordinator (Coordinator.JoinGroup) from the ranks still alive and
// the replacements of the lost ones, as a new generation with reducers of
// its own. The group goes on from the highest version any member holds: a
// step that completed on some rank before the failure is kept (every rank
// that applied it applied the same full sum), one that did not is redone.
// Members behind that version (a replacement, or a rank whose step failed
// where another's completed) receive the weights, the model's state and
// the optimizer's state from a member at that version, bit for bit, before
// training on. So a job that lost and replaced ranks ends with the weights
// of a job that lost none.
//
// Elastic jobs (GroupOptions::min_workers below --workers) go on with
// fewer ranks. The global batch stays --workers shards of --batch_size
// examples, each step the same examples as in a full job: the W members
// present split the shards (the member at index i computes shards i, i + W,
// ..., summing their gradients as gradient accumulation does), and the sum
// is divided by the shard count. Members join and leave at step
// boundaries: a group with a rank missing watches the coordinator for
// joiners (WatchGroup) and re-forms after the step in which one is seen; a
// rank told to stop leaves after its step while the others re-form, as
// long as at least min_workers remain (else every rank stops, as in a
// fixed job). A group that loses a rank re-forms with those left once
// min_workers have joined and GroupOptions::settle has passed.
//
// A stop is agreed between the ranks: the sum of each step carries, after
// the gradient in the session's own buffer, whether each rank was asked to
// stop and whether a joiner waits, so that one collective a step decides
// both with the gradient. Externally synchronized, except
// LeaveFromAnyThread.
#ifndef LOCKSTEP_WORKER_EXCHANGE_ALLREDUCE_STEP_SESSION_H_
#define LOCKSTEP_WORKER_EXCHANGE_ALLREDUCE_STEP_SESSION_H_

#include <atomic>
#include <memory>
#include <string>
#include <vector>

#include "absl/time/clock.h"
#include "common/optim/optimizer.h"
#include "worker/exchange/allreduce/contact_thread.h"
#include "worker/exchange/allreduce/coordinator_client.h"
#include "worker/exchange/group_watch.h"
#include "worker/exchange/step_recovery.h"
#include "worker/exchange/step_report_clock.h"
#include "worker/exchange/step_session.h"

namespace lockstep {

class AllReduceStepSession final : public StepSession {
 public:
  // options.reducer describes this rank and the job's group
  // (options.reducer.group is the prefix of every generation's keys,
  // options.reducer.size is --workers, the shards of each step).
  // `coordinator` forms the groups; it may be null only when
  // options.reducer.size is 1. `server` is where the ranks leave (null:
  // nowhere, in tests).
  AllReduceStepSession(const StepSessionOptions& options,
                       std::unique_ptr<PsClient> server,
                       std::unique_ptr<CoordinatorClient> coordinator);
  ~AllReduceStepSession() override;

  absl::StatusOr<StepOutcome> Join(const ModelSignature& signature,
                                   InitialFn initial, absl::Span<float> weights,
                                   absl::Span<float> gradient,
                                   absl::Duration timeout) override;
  absl::StatusOr<StepPlan> BeginStep() override;
  void GradientReady(int64_t /*begin*/, int64_t /*end*/) override {}
  void InputReady() override { clock_.InputReady(absl::Now()); }
  absl::StatusOr<StepOutcome> FinishStep() override;
  absl::Status AbandonStep() override;
  bool Stopping() const override { return agreed_stop_; }
  // Over the ring (as floats): the name is not checked across ranks.
  absl::StatusOr<std::vector<double>> Average(const std::string& name,
                                              absl::Span<const double> values,
                                              absl::Duration timeout) override;
  absl::Status Leave(const LeaveNote& note) override;
  absl::Status LeaveFromAnyThread() override;
  int64_t rejoins() const override { return recovery_.rejoins(); }
  StepTimings step_timings() const override { return StepTimings(); }
  int push_window() const override { return 0; }
  std::vector<int> NextBatchShards() const override;

  // The generation of the group this rank trains in (0 before the first
  // Join, and always with one rank).
  int64_t generation() const { return generation_; }

 private:
  // The first Join's part: the optimizer and version 0.
  absl::Status Start();
  // Joins (again): a new generation's reducer, and the state from a
  // member ahead.
  absl::StatusOr<StepOutcome> JoinOnce(absl::Duration timeout);
  // Joins the coordinator's forming group, waiting at most `timeout` and
  // the rendezvous timeout.
  absl::StatusOr<GroupView> JoinGroup(absl::Duration timeout);
  // Sends (`send`) or receives the weights and the optimizer's state with
  // one sum in which every other rank adds -0.0, which leaves each value's
  // bits unchanged.
  absl::Status ShareState(bool send);
  // The summed step: its gradient applied to the weights.
  absl::Status Reduce();
  // What the step's summed control values say: stops agreed, leaves, a
  // re-forming.
  void AfterStep(float stops, float joiners);
  bool Elastic() const {
    return group_.min_workers > 0 && group_.min_workers < reducer_options_.size;
  }
  // The group's watch (elastic): joiners waiting, and this rank alive.
  void StartWatch();

  const AllReduceOptions reducer_options_;
  const GroupOptions group_;
  const std::unique_ptr<PsClient> server_;                // May be null.
  const std::unique_ptr<CoordinatorClient> coordinator_;  // May be null.
  const std::function<absl::StatusOr<std::unique_ptr<AllReducer>>(
      const AllReduceOptions&)>
      create_;
  StepRecovery recovery_;
  const uint64_t member_;  // This process's id at the coordinator.
  ModelSignature signature_;
  std::string signature_proto_;  // Serialized, for the coordinator.
  InitialFn initial_;
  absl::Span<float> weights_;        // Not owned.
  absl::Span<float> lent_gradient_;  // Join's caller's; may be empty.
  // What each step sums: the gradient and state, then two control values
  // (kStopSlot, kJoinerSlot).
  std::vector<float> sum_;
  std::unique_ptr<AllReducer> reducer_;  // The current generation's.
  std::unique_ptr<Optimizer> optimizer_;
  int64_t num_parameters_ = 0;
  int64_t version_ = 0;  // Steps applied to the weights.
  int64_t generation_ = 0;
  int index_ = 0;             // This rank's place in the group.
  std::vector<int> members_;  // The group's ranks, ascending.
  bool in_step_ = false;
  bool regroup_ = false;             // Re-form before the next step.
  bool stop_sent_ = false;           // This rank's stop flag in the last step.
  bool agreed_stop_ = false;         // Every rank stops after the last step.
  std::vector<float> state_buffer_;  // ShareState's.
  // From the first Join to Leave: the server's sign that this rank lives,
  // and the bearer of its step reports (no shard sees this job's steps).
  std::unique_ptr<ContactThread> contact_;
  StepReportClock clock_;
  bool report_step_ = true;  // The step computes this rank's shard alone.
  std::atomic<bool> joiner_seen_{false};  // Set by watch_'s thread.
  GroupWatch watch_{coordinator_.get()};  // Goes before coordinator_.
};

}  // namespace lockstep

#endif  // LOCKSTEP_WORKER_EXCHANGE_ALLREDUCE_STEP_SESSION_H_
