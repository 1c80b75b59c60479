#include "worker/train/step_runner.h"

#include <algorithm>

#include "absl/strings/str_cat.h"
#include "absl/time/clock.h"
#include "common/base/random.h"
#include "common/base/status_macros.h"
#include "worker/data/image_data.h"
#include "worker/train/step_observer.h"

namespace lockstep {

StepRunner::StepRunner(const TrainerOptions* options, Model* model,
                       StepSession* session, const Dataset* train)
    : options_(*options),
      model_(model),
      session_(session),
      train_(train),
      num_parameters_(model->NumParameters()),
      own_weights_(model->NumParameters() + model->StateSize()) {
  weights_ = absl::MakeSpan(own_weights_);
}

ModelSignature StepRunner::Signature(int64_t total_steps) const {
  ModelSignature signature;
  signature.tensors = model_->Tensors();
  signature.state_tensors = model_->StateTensors();
  signature.optimizer = options_.optimizer;
  signature.chunk_bytes = options_.chunk_bytes;
  signature.num_workers = options_.num_workers;
  signature.num_shards = options_.num_shards;
  signature.total_steps = total_steps;
  switch (options_.sync) {
    case SyncMode::kSync:
    case SyncMode::kAllReduce:
      signature.sync.mode = SyncMode::kSync;
      signature.sync.backup_workers = options_.backup_workers;
      break;
    case SyncMode::kAsync:
      signature.sync.mode = SyncMode::kAsync;
      break;
    case SyncMode::kSsp:
      signature.sync.mode = SyncMode::kSsp;
      signature.sync.staleness = options_.staleness;
      break;
  }
  return signature;
}

absl::Status StepRunner::UseModelWeightBuffer() {
  if (!options_.initial_weights.empty() &&
      options_.initial_weights.size() != weights_.size()) {
    return absl::InvalidArgumentError(absl::StrCat(
        "the initial weights hold ", options_.initial_weights.size(),
        " values, the model ", weights_.size()));
  }
  ASSIGN_OR_RETURN(const absl::Span<float> lent, model_->HostWeightBuffer());
  if (!lent.empty() && lent.size() != weights_.size()) {
    return absl::InternalError(
        absl::StrCat("the model's host weight buffer holds ", lent.size(),
                     " floats, its weights and state ", weights_.size()));
  }
  if (!lent.empty() && lent.data() != weights_.data()) {
    std::copy(own_weights_.begin(), own_weights_.end(), lent.begin());
    weights_ = lent;
    own_weights_ = std::vector<float>();
  }
  return absl::OkStatus();
}

absl::StatusOr<StepOutcome> StepRunner::Join(int64_t total_steps) {
  auto initial = [this]() {
    if (!options_.initial_weights.empty()) return options_.initial_weights;
    std::vector<float> w = model_->InitialWeights(options_.seed);
    const std::vector<float> state = model_->InitialState();
    w.insert(w.end(), state.begin(), state.end());
    return w;
  };
  // Joining pulls the first weights: timed like every step's pull.
  PhaseTimer pull(options_.observer, StepObserver::Phase::kPull, 0);
  return session_->Join(Signature(total_steps), initial, weights_, {},
                        absl::InfiniteDuration());
}

absl::Status StepRunner::LoadModel() {
  const absl::Span<const float> all(weights_);
  RETURN_IF_ERROR(model_->SetWeights(all.subspan(0, num_parameters_)));
  if (model_->StateSize() > 0) {
    RETURN_IF_ERROR(model_->SetState(all.subspan(num_parameters_)));
  }
  return absl::OkStatus();
}

void StepRunner::Straggle(int64_t step) const {
  int64_t ms = options_.straggle_ms;
  if (options_.straggle_random_ms > 0) {
    Random random(Random::Derive(
        Random::Derive(options_.seed, static_cast<uint64_t>(options_.rank)),
        static_cast<uint64_t>(step)));
    ms += static_cast<int64_t>(
        random.UniformInt(options_.straggle_random_ms + 1));
  }
  if (ms > 0) options_.env->SleepFor(absl::Milliseconds(ms));
}

absl::StatusOr<BatchStats> StepRunner::ComputeShards(
    absl::Span<const Batch> batches, const StepPlan& plan,
    const Model::GradientReadyFn& ready) {
  const size_t n = weights_.size();
  const size_t state_size = n - num_parameters_;
  const absl::Span<float> gradient = plan.gradient;
  // Several shards (a job going on with fewer workers): summed into the
  // exchanged vector, or laid out one after the other in it.
  const bool apart = !plan.sum_shards_locally;
  BatchStats total;
  for (size_t k = 0; k < batches.size(); ++k) {
    if (k == 1 && !apart) shard_gradient_.resize(n);
    const absl::Span<float> into = k == 0 || apart
                                       ? gradient.subspan(k * n, n)
                                       : absl::MakeSpan(shard_gradient_);
    if (k > 0 && state_size > 0) {
      // Each shard's moving statistics start from the version's.
      RETURN_IF_ERROR(model_->SetState(
          absl::Span<const float>(weights_).subspan(num_parameters_)));
    }
    ASSIGN_OR_RETURN(
        const BatchStats batch,
        model_->ComputeGradients(batches[k].features, batches[k].labels,
                                 into.subspan(0, num_parameters_),
                                 batches.size() == 1 ? ready : nullptr));
    if (state_size > 0) {
      // The moving statistics this batch produced go out with the gradient.
      RETURN_IF_ERROR(model_->State(into.subspan(num_parameters_)));
      if (ready && batches.size() == 1) ready(num_parameters_, weights_.size());
    }
    if (k > 0 && !apart) {
      for (size_t i = 0; i < into.size(); ++i) gradient[i] += into[i];
    }
    total.loss_sum += batch.loss_sum;
    total.correct += batch.correct;
    total.examples += batch.examples;
  }
  return total;
}

absl::StatusOr<StepOutcome> StepRunner::Exchange(
    const StepPlan& plan, absl::Span<const Batch> batches, BatchStats* stats) {
  using Phase = StepObserver::Phase;  // Timed for metrics and traces.
  StepObserver* const observer = options_.observer;
  const int64_t step = plan.step;
  const absl::Time start = observer != nullptr ? absl::Now() : absl::Time();
  PhaseTimer pull(observer, Phase::kPull, step);
  const absl::Status loaded = LoadModel();
  pull.Stop();
  absl::StatusOr<BatchStats> computed =
      loaded.ok() ? absl::StatusOr<BatchStats>(BatchStats{}) : loaded;
  if (loaded.ok()) {
    PhaseTimer compute_phase(observer, Phase::kCompute, step);
    // Handing a range to the session (a push) is timed on its own.
    Model::GradientReadyFn ready;
    if (plan.streams) {
      ready = [&](int64_t begin, int64_t end) {
        PhaseTimer push(observer, Phase::kPush, step);
        session_->GradientReady(begin, end);
      };
    }
    computed = ComputeShards(batches, plan, ready);
  }
  if (!computed.ok()) {
    // What was not handed over is not this step's gradient: it must not
    // be sent.
    session_->AbandonStep().IgnoreError();
    return computed.status();
  }
  *stats = *computed;
  const absl::Time computed_at = absl::Now();
  absl::StatusOr<StepOutcome> outcome = session_->FinishStep();
  if (observer != nullptr && outcome.ok() && outcome->applied) {
    const absl::Time now = absl::Now();
    observer->OnPhase(Phase::kWait, step, computed_at, now);
    observer->OnStep(step, outcome->version, start, now);
  }
  return outcome;
}

absl::StatusOr<StepOutcome> StepRunner::Step(ShardedSampler* sampler,
                                             BatchStats* stats) {
  ASSIGN_OR_RETURN(const StepPlan plan, session_->BeginStep());
  const int64_t step = plan.step;
  const std::vector<int>& shards = plan.batch_shards;
  while (batches_.size() < shards.size()) batches_.push_back(NewBatch());
  for (size_t k = 0; k < shards.size(); ++k) {
    Batch& batch = batches_[k];
    const std::vector<int64_t> indices = sampler->BatchIndices(step, shards[k]);
    GatherBatch(*train_, indices, absl::MakeSpan(batch.features),
                absl::MakeSpan(batch.labels));
    if (options_.augmentation.random_crop ||
        options_.augmentation.horizontal_flip) {
      AugmentImages(options_.augmentation, options_.image_size, options_.seed,
                    step, indices, absl::MakeSpan(batch.features));
    }
  }
  if (options_.straggle_input_ms > 0) {
    options_.env->SleepFor(absl::Milliseconds(options_.straggle_input_ms));
  }
  session_->InputReady();  // What follows is compute, the delay included.
  Straggle(step);
  return Exchange(plan, absl::MakeConstSpan(batches_.data(), shards.size()),
                  stats);
}

StepRunner::Batch StepRunner::NewBatch() const {
  Batch batch;
  batch.features.resize(static_cast<size_t>(options_.batch_size) *
                        model_->FeatureSize());
  batch.labels.resize(options_.batch_size);
  return batch;
}

absl::StatusOr<BatchStats> StepRunner::Evaluate(const Dataset& data) {
  RETURN_IF_ERROR(LoadModel());
  return model_->Evaluate(data.features, data.labels);
}

}  // namespace lockstep
