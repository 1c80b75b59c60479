// The step session of the parameter-server modes (sync, async, ssp): each
// chunk of the gradient is pushed as soon as backprop has it, and the
// replies are decoded into the weights as they arrive. The sync mode is
// the one the job's signature names at Join: in sync mode steps are the
// job's global steps (the version answered is the next step), in async and
// SSP each worker counts its own.
//
// An elastic job (sync, GroupOptions::min_workers below --workers) goes
// on while at least the minimum of workers is there. They form a group at
// the coordinator (Coordinator.JoinGroup, group kPsGroupName) each time
// one joins or leaves; the step's global batch stays --workers shards, and
// the members cover the shards of absent ranks (StepPlan::batch_shards,
// laid side by side: the servers' barriers count shards). Every push names
// its group's generation and its shard; the servers refuse older
// generations (ParameterServer::Push), which is how every member learns
// that the group re-forms. A shard's gradient depends only on the step's
// weights and its examples, never on who computes it, so the weights are
// those of a job with every worker.
//
// Externally synchronized, except LeaveFromAnyThread.
#ifndef LOCKSTEP_WORKER_EXCHANGE_PS_STEP_SESSION_H_
#define LOCKSTEP_WORKER_EXCHANGE_PS_STEP_SESSION_H_

#include <memory>
#include <vector>

#include "worker/exchange/allreduce/coordinator_client.h"
#include "worker/exchange/group_watch.h"
#include "worker/exchange/step_recovery.h"
#include "worker/exchange/step_report_clock.h"
#include "worker/exchange/step_session.h"

namespace lockstep {

class PsStepSession final : public StepSession {
 public:
  // `coordinator` (may be null: not elastic) forms an elastic job's groups.
  PsStepSession(const StepSessionOptions& options,
                std::unique_ptr<PsClient> client,
                std::unique_ptr<CoordinatorClient> coordinator);
  ~PsStepSession() override;

  absl::StatusOr<StepOutcome> Join(const ModelSignature& signature,
                                   InitialFn initial, absl::Span<float> weights,
                                   absl::Span<float> gradient,
                                   absl::Duration timeout) override;
  absl::StatusOr<StepPlan> BeginStep() override;
  void InputReady() override { clock_.InputReady(absl::Now()); }
  void WorkBefore(absl::Duration input, absl::Duration compute) override {
    clock_.WorkBefore(input, compute);
  }
  void GradientReady(int64_t begin, int64_t end) override;
  absl::StatusOr<StepOutcome> FinishStep() override;
  absl::Status AbandonStep() override;
  bool Stopping() const override { return recovery_.StopRequested(); }
  absl::StatusOr<std::vector<double>> Average(const std::string& name,
                                              absl::Span<const double> values,
                                              absl::Duration timeout) override {
    return client_->Average(name, values, timeout);
  }
  absl::Status Leave(const LeaveNote& note) override;
  absl::Status LeaveFromAnyThread() override;
  int64_t rejoins() const override { return recovery_.rejoins(); }
  StepTimings step_timings() const override { return client_->step_timings(); }
  int push_window() const override { return client_->push_window(); }
  std::vector<int> NextBatchShards() const override { return shards_; }

 private:
  // Registers (after joining the group, when elastic) and pulls the
  // version to go on from.
  absl::StatusOr<StepOutcome> JoinOnce(absl::Duration timeout);
  // Sync mode, shards more than a step apart (one restarted from an older
  // checkpoint than the others hold): steps every shard past the newest
  // version they all hold back to it, and registers again; `reg` is the
  // registration that found them apart. FAILED_PRECONDITION when they
  // hold no common version (or cannot step back).
  absl::StatusOr<RegisterResult> StepBackShards(RegisterResult reg,
                                                absl::Duration timeout);
  // Elastic: joins the group and sets the shards this worker pushes.
  absl::Status JoinGroup(int64_t version, absl::Duration timeout);
  bool Synchronous() const { return signature_.sync.mode == SyncMode::kSync; }
  // The pushes of the step under way, or its shards' pushes at once.
  absl::StatusOr<int64_t> Exchange();
  // The next step starts now (StepReportClock).
  void RestartClock();

  const int rank_;
  const int workers_;
  const GroupOptions group_;
  const absl::Duration rendezvous_timeout_;
  const absl::Duration group_wait_;  // A joiner's longest (rejoin timeout).
  const std::unique_ptr<PsClient> client_;
  const std::unique_ptr<CoordinatorClient> coordinator_;  // Null: not elastic.
  StepRecovery recovery_;
  const uint64_t member_;           // Elastic: this process's group id.
  int64_t generation_ = 0;          // Of the group last joined.
  std::vector<int> members_;        // Its ranks.
  std::vector<int> shards_{rank_};  // The batch shards this worker pushes.
  // Elastic: open while this worker is in a generation, so that joiners
  // wait for it (the coordinator's quorum). Goes before coordinator_.
  GroupWatch watch_{coordinator_.get()};
  ModelSignature signature_;        // The job's, from Join.
  InitialFn initial_;
  absl::Span<float> weights_;  // Not owned.
  // One shard's gradient: lent by Join's caller, or own_gradient_.
  absl::Span<float> gradient_;
  std::vector<float> own_gradient_;
  std::vector<float> shards_gradient_;  // Several shards' side by side.
  int64_t version_ = -1;                // Of the weights in weights_.
  int64_t next_step_ = 0;
  bool in_step_ = false;
  bool streamed_ = false;  // The step under way pushes as ranges are ready.
  // The newest version this worker has pulled or stepped to. When it
  // registers again and a shard has no weights at all, the server lost
  // them (restarted without its checkpoint): initializing again would
  // silently start the job over, so Join refuses.
  int64_t seen_version_ = -1;
  // This worker's phases, reported on the next step's pushes.
  StepReportClock clock_;
  StepTimings timings_at_start_;  // The client's, when the step began.
  StepReport report_;
};

// The parameter-server modes' step rules. The step a worker trains after
// `step`, which was answered with `version`: in sync mode the job's global
// step (the version; later than step + 1 only with backup workers, a
// straggler then skipping the batches the others trained on), in async
// and SSP the worker's own count; INTERNAL when the answer breaks the
// mode's rules.
absl::StatusOr<int64_t> NextPsStep(const SyncPolicy& sync, int64_t step,
                                   int64_t version);
// The step a worker trains after registering at `version`, having got to
// `step` before: the version in sync mode (the data order follows it, so
// no batch is skipped or repeated), its own count otherwise.
int64_t PsStepAfterJoin(const SyncPolicy& sync, int64_t step, int64_t version);

// Rank `rank` leaves for the ranks of `workers` missing from `members`
// (ascending), the group that finishes the job, so that the servers need
// not wait for them. Failures are reported on stderr as `who`'s, and the
// rest still left for.
void LeaveForAbsentRanks(PsClient* client, const std::vector<int>& members,
                         int workers, const std::string& who);

}  // namespace lockstep

#endif  // LOCKSTEP_WORKER_EXCHANGE_PS_STEP_SESSION_H_
