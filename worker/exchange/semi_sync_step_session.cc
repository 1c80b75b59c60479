#include "worker/exchange/semi_sync_step_session.h"

#include <algorithm>
#include <cmath>
#include <cstdio>
#include <utility>

#include "absl/strings/str_cat.h"
#include "absl/strings/str_join.h"
#include "absl/time/clock.h"
#include "common/base/status_macros.h"

namespace lockstep {

int64_t SemiSyncRounds(int64_t total_steps, int64_t local_steps) {
  return (total_steps + local_steps - 1) / local_steps;
}

absl::Status CheckLocalSteps(int64_t local_steps, absl::string_view name) {
  if (local_steps < 2 || local_steps > 1000000) {
    return absl::InvalidArgumentError(
        absl::StrCat(name, " must be in [2, 1000000], got ", local_steps,
                     " (a round of one step is the synchronous mode)"));
  }
  return absl::OkStatus();
}

const std::vector<std::string>& RoundsModeNames() {
  static const auto* names = new std::vector<std::string>{"localsgd", "diloco"};
  return *names;
}

absl::StatusOr<OptimizerConfig> OuterOptimizer(
    absl::string_view mode, std::optional<double> lr,
    std::optional<double> momentum, const OuterOptimizerNames& names) {
  OptimizerConfig outer;
  if (mode == "localsgd") {
    if (momentum.has_value()) {
      return absl::InvalidArgumentError(absl::StrCat(
          names.momentum, " needs diloco (localsgd averages the weights)"));
    }
    outer = OptimizerConfig::Defaults("sgd");
    outer.learning_rate = lr.value_or(1.0);
  } else if (mode == "diloco") {
    outer = OptimizerConfig::Defaults("momentum");
    outer.learning_rate = lr.value_or(0.7);
    outer.momentum = momentum.value_or(0.9);
    outer.nesterov = true;
  } else {
    return absl::InvalidArgumentError(absl::StrCat(
        "rounds of local steps are localsgd or diloco, not \"", mode, "\""));
  }
  if (!(outer.learning_rate > 0) || !std::isfinite(outer.learning_rate)) {
    return absl::InvalidArgumentError(absl::StrCat(
        names.lr, " must be positive and finite, got ", outer.learning_rate));
  }
  if (!(outer.momentum >= 0 && outer.momentum < 1)) {
    return absl::InvalidArgumentError(absl::StrCat(
        names.momentum, " must be in [0, 1), got ", outer.momentum));
  }
  return outer;
}

SemiSyncStepSession::SemiSyncStepSession(const StepSessionOptions& options,
                                         std::unique_ptr<StepSession> rounds)
    : local_steps_(options.local_steps),
      outer_(options.outer_optimizer),
      rounds_(std::move(rounds)),
      who_(options.who) {
  if (!options.inner_state_dir.empty()) {
    store_.emplace(options.inner_state_dir, options.rank, options.env);
  }
}

void SemiSyncStepSession::ResumeInner(int64_t version) {
  // Past the next version: a backup worker's change was left out, as in a
  // fault-free run, whose state goes on too.
  if (version > version_) return;
  if (version == version_) {
    SetFlatSlots(*inner_, inner_anchor_);
    return;
  }
  // The servers stepped back.
  if (store_.has_value()) LoadInner(version, /*say_loaded=*/false);
}

void SemiSyncStepSession::LoadInner(int64_t version, bool say_loaded) {
  if (inner_->Slots().empty()) return;
  absl::StatusOr<bool> loaded = store_->Load(version, *inner_);
  const std::string path = store_->PathOf(version);
  if (!loaded.ok()) {
    std::fprintf(stderr, "%s: %s; the inner state goes on as it stands\n",
                 who_.c_str(), std::string(loaded.status().message()).c_str());
  } else if (!*loaded) {
    std::fprintf(stderr,
                 "%s: no inner optimizer state saved for version %lld (%s): "
                 "the inner state goes on as it stands\n",
                 who_.c_str(), static_cast<long long>(version), path.c_str());
  } else if (say_loaded) {
    std::fprintf(stderr,
                 "%s: the inner optimizer's state for version %lld from %s\n",
                 who_.c_str(), static_cast<long long>(version), path.c_str());
  }
}

int64_t SemiSyncStepSession::RoundStart(int64_t version) const {
  const int64_t start = version * local_steps_;
  return total_steps_ > 0 ? std::min(start, total_steps_) : start;
}

StepOutcome SemiSyncStepSession::StartRound(StepOutcome at) {
  // An elastic group's coverage holds for the whole round: a regroup
  // fails the round's push and starts the round again (FinishStep).
  shards_ = rounds_->NextBatchShards();
  RestartPhases();
  version_ = at.version;
  anchor_.assign(weights_.begin(), weights_.end());
  inner_anchor_ = FlatSlots(*inner_);
  step_ = RoundStart(at.next_step);
  at.next_step = step_;
  return at;
}

absl::StatusOr<StepOutcome> SemiSyncStepSession::Join(
    const ModelSignature& signature, InitialFn initial,
    absl::Span<float> weights, absl::Span<float> gradient,
    absl::Duration timeout) {
  RETURN_IF_ERROR(CheckLocalSteps(local_steps_, "local_steps"));
  if (signature.sync.mode != SyncMode::kSync) {
    return absl::InvalidArgumentError(
        "local steps need the synchronous parameter-server mode");
  }
  RETURN_IF_ERROR(CheckSessionBuffers(signature, weights, gradient));
  num_parameters_ = signature.NumParameters();
  ASSIGN_OR_RETURN(inner_,
                   Optimizer::Create(signature.optimizer, num_parameters_));
  total_steps_ = signature.total_steps;
  ModelSignature outer = signature;
  outer.inner_optimizer = signature.optimizer;
  outer.optimizer = outer_;
  outer.sync.local_steps = static_cast<int>(local_steps_);
  outer.total_steps = SemiSyncRounds(total_steps_, local_steps_);
  weights_ = weights;
  if (gradient.empty()) {
    own_gradient_.assign(weights.size(), 0.0f);
    gradient_ = absl::MakeSpan(own_gradient_);
  } else {
    gradient_ = gradient;
  }
  round_open_ = false;
  ps_open_ = false;
  ASSIGN_OR_RETURN(StepOutcome at, rounds_->Join(outer, std::move(initial),
                                                 weights, {}, timeout));
  if (store_.has_value() && !inner_->Slots().empty()) {
    // Files past this version are another history's.
    store_->ForgetAfter(at.version);
    // A replacement, or a job restored from the servers' checkpoints. A
    // file it cannot take only costs exactness: said, not fatal.
    if (at.version > 0) LoadInner(at.version, /*say_loaded=*/true);
  }
  return StartRound(at);
}

int64_t SemiSyncStepSession::RoundEnd() const {
  const int64_t end = (step_ / local_steps_ + 1) * local_steps_;
  return total_steps_ > 0 ? std::min(end, total_steps_) : end;
}

absl::StatusOr<StepPlan> SemiSyncStepSession::BeginStep() {
  round_open_ = true;
  // The PS step opens with the round's last local step, not its first:
  // its deadline (--step_timeout_s) bounds the push and the wait for the
  // others, not the whole round.
  if (!ps_open_ && step_ + 1 == RoundEnd()) {
    ASSIGN_OR_RETURN(round_, rounds_->BeginStep());
    const size_t n = weights_.size();
    if (round_.batch_shards != shards_) {
      rounds_->AbandonStep().IgnoreError();
      return absl::InternalError(absl::StrCat(
          "the round's push covers batch shards ",
          absl::StrJoin(round_.batch_shards, ","), " where its local steps ",
          "covered ", absl::StrJoin(shards_, ","),
          " (the group changed without a regroup)"));
    }
    if (round_.gradient.size() !=
        n * (round_.sum_shards_locally ? 1 : shards_.size())) {
      rounds_->AbandonStep().IgnoreError();
      return absl::InternalError(
          absl::StrCat("the round's push has room for ", round_.gradient.size(),
                       " values, not one vector of ", n, " for each of its ",
                       shards_.size(), " batch shard(s)"));
    }
    ps_open_ = true;
    input_reported_ = false;
    // The round's phases so far, and the time since its last local step:
    // input, as a step's clock counts it, unless the caller never says
    // when a batch is ready (then everything is compute).
    const absl::Duration gap = absl::Now() - step_end_;
    rounds_->WorkBefore(
        round_input_ + (inputs_seen_ ? gap : absl::ZeroDuration()),
        round_compute_ + (inputs_seen_ ? absl::ZeroDuration() : gap));
  }
  input_ready_ = absl::InfinitePast();
  StepPlan plan;
  plan.step = step_;
  plan.batch_shards = shards_;
  plan.gradient = gradient_;
  plan.sum_shards_locally = true;
  plan.streams = false;
  return plan;
}

void SemiSyncStepSession::RestartPhases() {
  step_end_ = absl::Now();
  input_ready_ = absl::InfinitePast();
  inputs_seen_ = false;
  round_input_ = round_compute_ = absl::ZeroDuration();
}

void SemiSyncStepSession::InputReady() {
  if (!ps_open_) {
    input_ready_ = absl::Now();
    inputs_seen_ = true;
  }
  if (!ps_open_ || input_reported_) return;
  input_reported_ = true;
  rounds_->InputReady();
}

absl::StatusOr<StepOutcome> SemiSyncStepSession::FinishStep() {
  if (!round_open_) {
    return absl::FailedPreconditionError("FinishStep without BeginStep");
  }
  const absl::Span<float> parameters = weights_.subspan(0, num_parameters_);
  if (shards_.size() > 1) {
    // Covering absent ranks: the shards' gradients and moving statistics
    // were summed; their mean is one batch of theirs all (gradient
    // accumulation), at the inner optimizer's own rate.
    const float shards = static_cast<float>(shards_.size());
    for (float& g : gradient_) g /= shards;
  }
  inner_->Apply(step_, 0, parameters,
                absl::Span<const float>(gradient_).subspan(0, num_parameters_));
  // The model's state (batch-norm statistics) is the worker's own.
  std::copy(gradient_.begin() + num_parameters_, gradient_.end(),
            weights_.begin() + num_parameters_);
  ++step_;
  if (!ps_open_) {  // The round goes on.
    // Its phases, as a step's clock splits them (StepReportClock): input
    // from the last step's end to the batch, compute the rest.
    const absl::Time now = absl::Now();
    const absl::Time computing =
        input_ready_ == absl::InfinitePast() ? step_end_ : input_ready_;
    round_input_ += computing - step_end_;
    round_compute_ += now - computing;
    step_end_ = now;
    StepOutcome local;
    local.applied = true;
    local.version = version_;
    local.next_step = step_;
    return local;
  }
  // The round's change, as the PS step's gradient: the outer optimizer
  // applies its mean with the sign of a gradient (the version minus the
  // worker's weights), and the state goes as in any step. A member
  // covering absent ranks pushes it for each shard it covers: the servers'
  // mean over the job's shards weighs each member's change by the batches
  // it trained on.
  const size_t n = weights_.size();
  const absl::Span<float> change = round_.gradient.subspan(0, n);
  for (int64_t i = 0; i < num_parameters_; ++i) {
    change[i] = anchor_[i] - parameters[i];
  }
  std::copy(weights_.begin() + num_parameters_, weights_.end(),
            change.begin() + num_parameters_);
  for (size_t k = 1; k * n < round_.gradient.size(); ++k) {
    std::copy(change.begin(), change.end(), round_.gradient.begin() + k * n);
  }
  round_open_ = false;
  ps_open_ = false;
  if (store_.has_value()) {
    // What the next round starts with, saved before the push makes it.
    if (absl::Status saved = store_->Save(version_ + 1, *inner_); !saved.ok()) {
      std::fprintf(stderr, "%s: %s (the inner state is not saved)\n",
                   who_.c_str(), std::string(saved.message()).c_str());
    }
  }
  ASSIGN_OR_RETURN(StepOutcome at, rounds_->FinishStep());
  // The weights now hold the version the round made (or the one a rejoin
  // found); with backup workers it may be past the one this round began at.
  ResumeInner(at.version);
  return StartRound(at);
}

absl::Status SemiSyncStepSession::AbandonStep() {
  if (!round_open_) return absl::OkStatus();
  round_open_ = false;
  // The round starts again from its version, and its inner state.
  RestartPhases();
  std::copy(anchor_.begin(), anchor_.end(), weights_.begin());
  SetFlatSlots(*inner_, inner_anchor_);
  step_ = RoundStart(version_);
  if (!ps_open_) return absl::OkStatus();
  ps_open_ = false;
  return rounds_->AbandonStep();
}

}  // namespace lockstep
