#include "worker/exchange/step_session.h"

#include <utility>

#include "absl/strings/str_cat.h"
#include "common/base/status_macros.h"
#include "worker/exchange/allreduce/coordinator_client.h"
#include "worker/exchange/allreduce_step_session.h"
#include "worker/exchange/ps_step_session.h"
#include "worker/exchange/semi_sync_step_session.h"

namespace lockstep {

absl::Status CheckSessionBuffers(const ModelSignature& signature,
                                 absl::Span<const float> weights,
                                 absl::Span<const float> gradient) {
  const size_t expect = static_cast<size_t>(signature.NumParameters() +
                                            signature.NumStateElements());
  if (weights.size() != expect) {
    return absl::InvalidArgumentError(
        absl::StrCat("the weights buffer holds ", weights.size(),
                     " values, the model's parameters and state ", expect));
  }
  if (!gradient.empty() && gradient.size() != expect) {
    return absl::InvalidArgumentError(
        absl::StrCat("the gradient buffer holds ", gradient.size(),
                     " values, the model's parameters and state ", expect));
  }
  return absl::OkStatus();
}

absl::Status CheckNotPastEnd(const ModelSignature& signature,
                             const StepOutcome& joined) {
  if (signature.total_steps > 0 && joined.next_step > signature.total_steps) {
    return absl::FailedPreconditionError(
        absl::StrCat("the server is at version ", joined.version,
                     ", past this job's ", signature.total_steps, " steps"));
  }
  return absl::OkStatus();
}

absl::StatusOr<std::unique_ptr<StepSession>> StepSession::Create(
    StepSessionOptions o) {
  // All-reduce steps push nothing: no thread for them.
  if (o.allreduce) o.client.push_thread = false;
  ASSIGN_OR_RETURN(std::unique_ptr<PsClient> client,
                   PsClient::Create(o.client));
  const bool elastic =
      o.group.min_workers > 0 && o.group.min_workers < o.num_workers;
  std::unique_ptr<CoordinatorClient> coordinator;
  if (o.allreduce) {
    // Groups of more than one rank form at the coordinator (Join).
    if (o.reducer.size > 1) {
      ASSIGN_OR_RETURN(coordinator, CoordinatorClient::Create(
                                        o.reducer.coordinator, o.reducer.tls));
    }
    return std::unique_ptr<StepSession>(std::make_unique<AllReduceStepSession>(
        o, std::move(client), std::move(coordinator)));
  }
  if (elastic) {
    // The workers' group forms at the first server's coordinator.
    ASSIGN_OR_RETURN(coordinator, CoordinatorClient::Create(
                                      o.client.servers.front(), o.client.tls));
  }
  auto session = std::make_unique<PsStepSession>(o, std::move(client),
                                                 std::move(coordinator));
  if (o.local_steps > 1) {
    return std::unique_ptr<StepSession>(
        std::make_unique<SemiSyncStepSession>(o, std::move(session)));
  }
  return std::unique_ptr<StepSession>(std::move(session));
}

}  // namespace lockstep
