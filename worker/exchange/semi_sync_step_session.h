// The semi-synchronous step session (LocalSGD, DiLoCo): each worker takes
// `local_steps` (H) steps of the job's optimizer (the inner one) on its own
// weights, then pushes the change of its weights since the version it
// pulled, as the gradient of one synchronous step of the parameter
// servers. The servers average the workers' changes and apply the outer
// optimizer to them (plain SGD at rate 1 for LocalSGD: the next version is
// the mean of the workers' weights; Nesterov momentum for DiLoCo), and
// publish the next version, which every worker starts its next round from.
//
// It wraps the synchronous PS session, so a round has every guarantee a
// synchronous step has (each change counted exactly once, checkpoints of
// the outer weights and optimizer, rejoin after a lost server or worker,
// backup workers: a late worker's change is dropped and it starts over
// from the version the others made; elastic membership: a member covering
// absent ranks trains on their batches too, averaged with its own as one
// larger batch, and pushes its change for each shard it covers, so the
// servers' mean weighs each member by the batches it trained on; a regroup
// starts the round under way again with the new group). Versions count
// rounds; the steps the trainer sees count local steps (round r is local
// steps [r H, (r + 1) H), the last one shorter when H does not divide the
// job's length).
//
// What stays on the worker: the inner optimizer's state (kept across rounds,
// as each worker of a DiLoCo job keeps its own; a round started again
// starts from the state it began with), and the local steps of a round that
// never reached the servers (a rejoin starts the round again from the
// version it finds). With inner_state_dir the state of each round's end is
// saved before its push (InnerStateStore), and a replacement process, or a
// rejoin that finds another version, takes the state saved for the
// version it starts from. The model's state (batch-norm statistics) is
// this worker's own during a round and becomes the workers' mean at each
// version.
#ifndef LOCKSTEP_WORKER_EXCHANGE_SEMI_SYNC_STEP_SESSION_H_
#define LOCKSTEP_WORKER_EXCHANGE_SEMI_SYNC_STEP_SESSION_H_

#include <cstdint>
#include <memory>
#include <optional>
#include <string>
#include <vector>

#include "absl/strings/string_view.h"
#include "absl/time/time.h"
#include "common/optim/optimizer.h"
#include "worker/exchange/inner_state_store.h"
#include "worker/exchange/step_session.h"

namespace lockstep {

class SemiSyncStepSession final : public StepSession {
 public:
  // `rounds` is a synchronous PS session (elastic or not); the options
  // give local_steps (above 1) and outer_optimizer.
  SemiSyncStepSession(const StepSessionOptions& options,
                      std::unique_ptr<StepSession> rounds);

  // `signature` is the job's as a synchronous one would be: its optimizer
  // is the inner one and its total_steps counts local steps. The servers
  // are given the outer optimizer, local_steps, the inner optimizer and
  // the number of rounds.
  absl::StatusOr<StepOutcome> Join(const ModelSignature& signature,
                                   InitialFn initial, absl::Span<float> weights,
                                   absl::Span<float> gradient,
                                   absl::Duration timeout) override;
  absl::StatusOr<StepPlan> BeginStep() override;
  // The phases the round's push reports (the straggler verdict) cover
  // the whole round: each local step's input (to this call) and compute.
  void InputReady() override;
  void GradientReady(int64_t, int64_t) override {}  // Plans never stream.
  absl::StatusOr<StepOutcome> FinishStep() override;
  absl::Status AbandonStep() override;
  // A stop signal ends the run at the end of the round under way, so that
  // no local step is lost.
  bool Stopping() const override { return !round_open_ && rounds_->Stopping(); }
  absl::StatusOr<std::vector<double>> Average(const std::string& name,
                                              absl::Span<const double> values,
                                              absl::Duration timeout) override {
    return rounds_->Average(name, values, timeout);
  }
  absl::Status Leave(const LeaveNote& note) override {
    return rounds_->Leave(note);
  }
  absl::Status LeaveFromAnyThread() override {
    return rounds_->LeaveFromAnyThread();
  }
  int64_t rejoins() const override { return rounds_->rejoins(); }
  StepTimings step_timings() const override { return rounds_->step_timings(); }
  int push_window() const override { return rounds_->push_window(); }
  // The round's: they change only when a round starts.
  std::vector<int> NextBatchShards() const override { return shards_; }

 private:
  // The round that begins at the version now in the weights.
  StepOutcome StartRound(StepOutcome at);
  // The local step a version starts at, and the one after the round that
  // step_ is in.
  int64_t RoundStart(int64_t version) const;
  int64_t RoundEnd() const;
  // The inner state a round at `version` starts with, after FinishStep
  // found `version` where the round began at version_: a later version's
  // the state as it stands; a redone round's its own start's; an earlier
  // one's (the servers stepped back) what the store saved for it (as it
  // stands when there is none).
  void ResumeInner(int64_t version);
  // The round's phases start over (a round begins, or begins again).
  void RestartPhases();
  // The state the store saved for `version`, if any; says what it took
  // (`say_loaded`) or why it took none.
  void LoadInner(int64_t version, bool say_loaded);

  const int64_t local_steps_;
  const OptimizerConfig outer_;
  const std::unique_ptr<StepSession> rounds_;
  std::unique_ptr<Optimizer> inner_;
  std::vector<float> inner_anchor_;  // Its state at the round's start.
  std::optional<InnerStateStore> store_;
  const std::string who_;
  int64_t total_steps_ = 0;  // Local steps; 0: unbounded.
  int64_t num_parameters_ = 0;
  absl::Span<float> weights_;   // Not owned.
  absl::Span<float> gradient_;  // Lent by Join's caller, or own_gradient_.
  std::vector<float> own_gradient_;
  std::vector<float> anchor_;  // The round's version (parameters, state).
  int64_t version_ = 0;        // Of anchor_.
  std::vector<int> shards_;    // The batch shards the round covers.
  int64_t step_ = 0;           // The next local step.
  bool round_open_ = false;    // A local step has begun since the last push.
  bool ps_open_ = false;       // The round's PS step has begun (last step).
  bool input_reported_ = false;
  // The round's phases before its PS step: local steps' input and
  // compute, the last local step's end and this step's batch.
  absl::Duration round_input_, round_compute_;
  absl::Time step_end_ = absl::InfinitePast();
  absl::Time input_ready_ = absl::InfinitePast();
  bool inputs_seen_ = false;  // InputReady came in this round.
  StepPlan round_;  // The PS step's plan, while ps_open_.
};

// The job's length in rounds of `local_steps`: what the servers count.
int64_t SemiSyncRounds(int64_t total_steps, int64_t local_steps);

// The rounds' length unless one is given, and the range one must be in
// (INVALID_ARGUMENT naming it as `name` otherwise).
inline constexpr int kDefaultLocalSteps = 10;
absl::Status CheckLocalSteps(int64_t local_steps, absl::string_view name);

// The modes with rounds of local steps, by name: "localsgd", "diloco".
const std::vector<std::string>& RoundsModeNames();
// The servers' (outer) optimizer of `mode`: for localsgd SGD at `lr`
// (default 1: the next version is the mean of the workers' weights; a
// momentum is refused), for diloco Nesterov momentum at `lr` (default 0.7)
// and `momentum` (default 0.9), the DiLoCo paper's. INVALID_ARGUMENT for
// another mode or values out of range; `names` are the settings' names in
// messages (flags or keyword arguments).
struct OuterOptimizerNames {
  std::string lr = "--outer_lr";
  std::string momentum = "--outer_momentum";
};
absl::StatusOr<OptimizerConfig> OuterOptimizer(
    absl::string_view mode, std::optional<double> lr,
    std::optional<double> momentum,
    const OuterOptimizerNames& names = OuterOptimizerNames());

}  // namespace lockstep

#endif  // LOCKSTEP_WORKER_EXCHANGE_SEMI_SYNC_STEP_SESSION_H_
