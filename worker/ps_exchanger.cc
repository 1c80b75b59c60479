#include "worker/ps_exchanger.h"

#include <algorithm>

#include "common/status_macros.h"

namespace lockstep {

absl::StatusOr<int64_t> PsExchanger::Join(
    const ModelSignature& signature,
    const std::function<std::vector<float>()>& initial,
    absl::Span<float> weights, absl::Duration timeout) {
  ASSIGN_OR_RETURN(RegisterResult reg,
                   client_->Register(rank_, signature, timeout));
  if (reg.must_initialize) {
    // Rank 0 defines version 0; everyone else receives it.
    const std::vector<float> version0 = initial();
    RETURN_IF_ERROR(client_->Initialize(version0));
  }
  return client_->Pull(std::max<int64_t>(reg.version, 0), weights);
}

absl::StatusOr<int64_t> PsExchanger::Step(int64_t step,
                                          absl::Span<float> gradient,
                                          absl::Span<float> weights,
                                          const ComputeFn& compute,
                                          BatchStats* stats) {
  RETURN_IF_ERROR(client_->BeginStep(step, gradient, weights));
  absl::StatusOr<BatchStats> computed =
      compute([this](int64_t begin, int64_t end) {
        client_->GradientReady(begin, end);
      });
  // Always finish the step, so no push outlives it.
  absl::StatusOr<int64_t> version = client_->FinishStep();
  if (!computed.ok()) return computed.status();
  *stats = *computed;
  return version;
}

}  // namespace lockstep
