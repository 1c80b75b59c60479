#include "worker/exchange/ps_exchanger.h"

#include <algorithm>

#include "absl/strings/str_cat.h"
#include "common/status_macros.h"

namespace lockstep {

absl::StatusOr<int64_t> PsExchanger::Join(
    const ModelSignature& signature,
    const std::function<std::vector<float>()>& initial,
    absl::Span<float> weights, absl::Duration timeout) {
  sync_ = signature.sync;
  ASSIGN_OR_RETURN(RegisterResult reg,
                   client_->Register(rank_, signature, timeout));
  if (reg.version < 0 && seen_version_ > 0) {
    return absl::FailedPreconditionError(absl::StrCat(
        "a parameter server came back without the job's weights (restarted "
        "without a checkpoint, or with an empty checkpoint directory) after "
        "version ",
        seen_version_,
        "; starting over from the initial weights would discard that "
        "training. Restart the whole job, or give the servers a "
        "checkpoint directory that outlives them (docs/faults.md)"));
  }
  // In sync mode shards differ by one step at most (one has closed the
  // step the other still gathers). More, and a shard restored an older
  // checkpoint than the others hold: their steps cannot line up again.
  if (signature.sync.mode == SyncMode::kSync && reg.version >= 0 &&
      reg.newest_version > reg.version + 1) {
    return absl::FailedPreconditionError(absl::StrCat(
        "the parameter-server shards are at versions ", reg.version, " to ",
        reg.newest_version,
        ": a shard restarted from an older checkpoint than the others "
        "hold. Restart every shard, from checkpoints of one version "
        "(docs/faults.md)"));
  }
  if (reg.must_initialize) {
    // Rank 0 defines version 0; everyone else receives it.
    const std::vector<float> version0 = initial();
    RETURN_IF_ERROR(client_->Initialize(version0));
  }
  // Exactly the version registered at: if some chunks have already closed
  // the step after it (a worker was lost in the middle of that step), the
  // step is recomputed from the weights it was computed from.
  ASSIGN_OR_RETURN(const int64_t version,
                   client_->Pull(std::max<int64_t>(reg.version, 0), weights,
                                 /*exact=*/true));
  seen_version_ = std::max(seen_version_, version);
  return version;
}

absl::StatusOr<int64_t> PsExchanger::Step(int64_t step,
                                          absl::Span<float> gradient,
                                          absl::Span<float> weights,
                                          const ComputeFn& compute,
                                          BatchStats* stats) {
  RETURN_IF_ERROR(BeginStep(step, gradient, weights));
  absl::StatusOr<BatchStats> computed = compute(
      [this](int64_t begin, int64_t end) { GradientReady(begin, end); });
  if (!computed.ok()) {
    // What was not handed over is not this step's gradient (the last
    // step's, or half written): it must not be pushed. No push outlives
    // the step either way.
    AbandonStep();
    return computed.status();
  }
  absl::StatusOr<int64_t> version = FinishStep();
  *stats = *computed;
  return version;
}

absl::StatusOr<int64_t> PsExchanger::FinishStep() {
  absl::StatusOr<int64_t> version = client_->FinishStep();
  if (version.ok()) seen_version_ = std::max(seen_version_, *version);
  return version;
}

absl::StatusOr<int64_t> PsExchanger::NextStep(int64_t step,
                                              int64_t version) const {
  if (sync_.mode != SyncMode::kSync) return step + 1;  // Its own steps.
  // With backup workers a straggler may be answered with a later version;
  // its data position follows the version, so it skips the batches the
  // others already trained on.
  if (sync_.backup_workers == 0 && version != step + 1) {
    return absl::InternalError(
        absl::StrCat("step ", step, " was answered with version ", version));
  }
  return std::max(step + 1, version);
}

int64_t PsExchanger::StepAfterJoin(int64_t step, int64_t version) const {
  // Synchronous steps follow the server's version (the data order follows
  // it, so no batch is skipped or repeated); in the asynchronous modes the
  // version counts every worker's pushes and each worker walks its own
  // steps.
  return sync_.mode == SyncMode::kSync ? version : step;
}

}  // namespace lockstep
