#include "worker/exchange/allreduce_exchanger.h"

#include <algorithm>

#include "absl/strings/str_cat.h"
#include "common/status_macros.h"

namespace lockstep {

absl::StatusOr<int64_t> AllReduceExchanger::Join(
    const ModelSignature& signature,
    const std::function<std::vector<float>()>& initial,
    absl::Span<float> weights, absl::Duration timeout) {
  ASSIGN_OR_RETURN(optimizer_, Optimizer::Create(signature.optimizer,
                                                 signature.NumParameters()));
  num_parameters_ = signature.NumParameters();
  // Every rank draws version 0 from the same seed with a generator that
  // gives the same bits everywhere, so nothing needs to be sent.
  const std::vector<float> version0 = initial();
  if (version0.size() != weights.size()) {
    return absl::InternalError(absl::StrCat(
        "initial weights have ", version0.size(), " values, expected ",
        weights.size()));
  }
  std::copy(version0.begin(), version0.end(), weights.begin());
  return 0;
}

absl::StatusOr<int64_t> AllReduceExchanger::Step(int64_t step,
                                                 absl::Span<float> gradient,
                                                 absl::Span<float> weights,
                                                 const ComputeFn& compute,
                                                 BatchStats* stats) {
  ASSIGN_OR_RETURN(*stats, compute(nullptr));
  if (gradient.size() != weights.size() + 1) {
    return absl::InternalError(
        absl::StrCat("all-reduce gradient vector has ", gradient.size(),
                     " values, expected ", weights.size() + 1,
                     " (the weights and the stop flag)"));
  }
  // Read as late as possible: a stop asked for after this goes with the
  // next step.
  gradient[weights.size()] =
      stop_requested_ != nullptr && stop_requested_->load() ? 1.0f : 0.0f;
  RETURN_IF_ERROR(reducer_->AllReduceSum(gradient));
  // The same scaling as a parameter server's: the sum times 1/W, in the
  // optimizer's pass.
  const float scale = 1.0f / static_cast<float>(num_workers_);
  const absl::Span<float> parameters = weights.subspan(0, num_parameters_);
  optimizer_->ApplyMean(step, 0, parameters, parameters,
                        gradient.subspan(0, num_parameters_), scale);
  // The state (batch-norm statistics) becomes the workers' mean.
  for (size_t i = static_cast<size_t>(num_parameters_); i < weights.size();
       ++i) {
    weights[i] = gradient[i] * scale;
  }
  // Some rank was asked to stop: every rank stops after this same step, so
  // none waits for the others in a step they will not take.
  if (gradient[weights.size()] > 0 && stop_agreed_ != nullptr) {
    stop_agreed_->store(true);
  }
  return step + 1;
}

absl::Status AllReduceExchanger::Leave() {
  if (server_ == nullptr) return absl::OkStatus();
  return server_->LeaveUnregistered(rank_);
}

}  // namespace lockstep
