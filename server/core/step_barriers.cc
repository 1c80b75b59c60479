#include "server/core/step_barriers.h"

#include <algorithm>
#include <utility>

#include "absl/strings/str_cat.h"
#include "common/base/status_macros.h"

namespace lockstep {
namespace {

absl::Status CheckSyncPolicy(const SyncPolicy& sync,
                             const OptimizerConfig& optimizer,
                             int num_workers) {
  if (sync.mode == SyncMode::kAllReduce) {
    return absl::InvalidArgumentError(
        "a signature's sync mode is sync, async or ssp (an all-reduce job's "
        "is sync)");
  }
  if (sync.backup_workers < 0 || sync.backup_workers >= num_workers) {
    return absl::InvalidArgumentError(
        absl::StrCat("backup_workers must be in [0, ", num_workers, "), got ",
                     sync.backup_workers));
  }
  if (sync.backup_workers > 0 && sync.mode != SyncMode::kSync) {
    return absl::InvalidArgumentError(
        "backup_workers applies to sync mode only");
  }
  // The summation mode's workers each apply every step's mean themselves:
  // one they missed (a dropped backup, an async step) would part them.
  if (optimizer.name == OptimizerConfig::kAverage &&
      (sync.mode != SyncMode::kSync || sync.backup_workers > 0)) {
    return absl::InvalidArgumentError(
        "the summation mode (optimizer \"average\") runs in sync mode "
        "without backup workers: every worker applies every step's mean");
  }
  if (sync.staleness < 0) {
    return absl::InvalidArgumentError(
        absl::StrCat("staleness must not be negative, got ", sync.staleness));
  }
  // LocalSGD and DiLoCo: a version is a round every worker's change meets
  // in; the asynchronous modes have no rounds.
  if (sync.SemiSynchronous() && sync.mode != SyncMode::kSync) {
    return absl::InvalidArgumentError(absl::StrCat(
        "local_steps (", sync.local_steps, ") needs sync mode, not ",
        SyncModeName(sync.mode)));
  }
  return absl::OkStatus();
}

}  // namespace

int64_t ShardStateBytes(int64_t elements, const OptimizerConfig& optimizer) {
  int slots = 2;  // Adam and AdamW: m and v.
  if (optimizer.name == "sgd" || optimizer.name == OptimizerConfig::kAverage) {
    slots = 0;
  } else if (optimizer.name == "momentum") {
    slots = 1;
  }
  return elements * static_cast<int64_t>(sizeof(float)) * (3 + slots);
}

StepBarriers::StepBarriers(const ParameterServerOptions& options,
                           BarrierCounters* counters)
    : options_(options), counters_(counters) {}

absl::StatusOr<ChunkBarrier*> StepBarriers::Owned(const Layout* layout,
                                                  int chunk) const {
  const int num_chunks =
      layout == nullptr ? 0 : static_cast<int>(layout->chunks.size());
  if (chunk < 0 || chunk >= num_chunks) {
    return absl::InvalidArgumentError(
        absl::StrCat("chunk ", chunk, " is outside [0, ", num_chunks, ")"));
  }
  if (layout->chunks[chunk] == nullptr) {
    return absl::InvalidArgumentError(
        absl::StrCat("chunk ", chunk, " belongs to shard ",
                     layout->plan.chunks()[chunk].shard, ", not to this shard ",
                     options_.shard));
  }
  return layout->chunks[chunk].get();
}

int64_t StepBarriers::Version(const Layout* layout) {
  if (layout == nullptr || layout->owned.empty()) return -1;
  int64_t version = layout->owned.front()->version();
  for (const ChunkBarrier* c : layout->owned) {
    version = std::min(version, c->version());
  }
  return version;
}

absl::StatusOr<std::unique_ptr<StepBarriers::Layout>>
StepBarriers::BuildLayoutLocked(const ModelSignature& signature) const {
  RETURN_IF_ERROR(CheckSyncPolicy(signature.sync, signature.optimizer,
                                  options_.num_workers));
  ASSIGN_OR_RETURN(
      ChunkPlan plan,
      ChunkPlan::Create(signature.NumParameters(), signature.chunk_bytes,
                        options_.num_shards, signature.NumStateElements()));
  if (plan.num_chunks() == 0) {
    return absl::InvalidArgumentError("the model has no parameters");
  }
  int64_t owned = 0;
  for (const Chunk& chunk : plan.chunks()) {
    if (chunk.shard == options_.shard) owned += chunk.size;
  }
  const int64_t needed = ShardStateBytes(owned, signature.optimizer);
  if (options_.max_state_bytes > 0 && needed > options_.max_state_bytes) {
    return absl::ResourceExhaustedError(absl::StrCat(
        "the model needs about ", needed >> 20, " MiB on shard ",
        options_.shard, " (", owned, " values: weights, their sum, a copy and ",
        signature.optimizer.name, "'s state), more than the ",
        options_.max_state_bytes >> 20, " MiB this server may use"));
  }
  auto layout = std::make_unique<Layout>(signature.sync, std::move(plan));
  for (const Chunk& chunk : layout->plan.chunks()) {
    if (chunk.shard != options_.shard) {
      layout->chunks.push_back(nullptr);  // Another shard's.
      continue;
    }
    // Checked now; created (with its state) when the weights come.
    RETURN_IF_ERROR(Optimizer::Create(signature.optimizer, 0).status());
    layout->chunks.push_back(std::make_unique<ChunkBarrier>(
        chunk, signature.sync, options_.num_workers, signature.optimizer,
        counters_, options_.observer, options_.sum_order, options_.pool,
        options_.env));
    // Steps are the job's versions only in sync mode: there the shards'
    // checkpoints can share versions.
    if (signature.sync.mode == SyncMode::kSync) {
      layout->chunks.back()->PinEvery(options_.checkpoint_every_steps);
    }
    layout->owned.push_back(layout->chunks.back().get());
  }
  return layout;
}

absl::Status StepBarriers::ConfigureLocked(const ModelSignature& signature) {
  ASSIGN_OR_RETURN(std::unique_ptr<Layout> layout,
                   BuildLayoutLocked(signature));
  signature_ = signature;
  // Earlier layouts stay alive: a caller may still hold a pointer into one
  // (their barriers are closed).
  layouts_.push_back(std::move(layout));
  layout_.store(layouts_.back().get(), std::memory_order_release);
  return absl::OkStatus();
}

absl::Status StepBarriers::CheckRegistrationLocked(
    int rank, const ModelSignature& signature) const {
  if (shutting_down()) {
    return absl::UnavailableError("server is shutting down");
  }
  if (draining_) {
    // Its steps are over: a worker waits for the server that follows.
    return absl::UnavailableError(
        "the server is draining: it takes no new steps");
  }
  if (rank < 0 || rank >= options_.num_workers) {
    return absl::InvalidArgumentError(
        absl::StrCat("rank ", rank, " is outside [0, ", options_.num_workers,
                     ") for this job"));
  }
  if (signature.num_workers != options_.num_workers) {
    return absl::FailedPreconditionError(absl::StrCat(
        "model signature differs from the job's: num_workers: server has ",
        options_.num_workers, ", worker says ", signature.num_workers));
  }
  if (signature.num_shards != options_.num_shards) {
    return absl::FailedPreconditionError(absl::StrCat(
        "model signature differs from the job's: num_shards: server is shard ",
        options_.shard, " of ", options_.num_shards, ", worker says ",
        signature.num_shards, " shard(s)"));
  }
  return absl::OkStatus();
}

absl::Status StepBarriers::AdoptSignatureLocked(int rank,
                                                const ModelSignature& signature,
                                                Membership* members,
                                                Revocation* revoked) {
  if (!signature_.has_value()) return ConfigureLocked(signature);
  const std::string diff = DescribeDifference(*signature_, signature);
  if (diff.empty()) return absl::OkStatus();
  if (length_open_) {
    ModelSignature same_length = signature;
    same_length.total_steps = signature_->total_steps;
    if (DescribeDifference(*signature_, same_length).empty()) {
      return ExtendLocked(signature.total_steps);
    }
  }
  if (rank != 0 || signature_from_rank0_ || Version(layout()) >= 0) {
    return absl::FailedPreconditionError(
        absl::StrCat("model signature differs from the job's: ", diff));
  }
  // Rank 0 defines the model. Workers that registered another one before
  // it are refused now, rather than left waiting for a version 0 that
  // would not fit them.
  revoked->reason = absl::StrCat("model signature differs from rank 0's: ",
                                 DescribeDifference(signature, *signature_));
  members->RevokeAllButRankZero(revoked->reason);
  revoked->barriers = layout()->owned;
  return ConfigureLocked(signature);
}

absl::Status StepBarriers::ExtendLocked(int64_t total_steps) {
  const int64_t version = Version(layout());
  if (total_steps != 0 && total_steps < version) {
    return absl::FailedPreconditionError(absl::StrCat(
        "model signature differs from the job's: total_steps: the restored "
        "job is at step ",
        version, ", past the worker's ", total_steps,
        " (a resumed job may grow, not end before where it is)"));
  }
  signature_->total_steps = total_steps;
  return absl::OkStatus();
}

absl::StatusOr<Registration> StepBarriers::Register(
    int rank, const ModelSignature& signature, Membership* members,
    Revocation* revoked) {
  absl::MutexLock lock(&mu_);
  RETURN_IF_ERROR(CheckRegistrationLocked(rank, signature));
  RETURN_IF_ERROR(AdoptSignatureLocked(rank, signature, members, revoked));
  if (rank == 0) signature_from_rank0_ = true;
  length_open_ = false;
  Registration reg;
  ASSIGN_OR_RETURN(reg.incarnation, members->Admit(rank));
  reg.version = Version(layout());
  reg.must_initialize = rank == 0 && reg.version < 0;
  reg.server_incarnation = members->server_incarnation();
  return reg;
}

absl::Status StepBarriers::CheckCheckpointPlace(
    const ShardCheckpoint& checkpoint) const {
  if (checkpoint.shard != options_.shard ||
      checkpoint.num_shards != options_.num_shards ||
      checkpoint.num_workers != options_.num_workers) {
    return absl::FailedPreconditionError(absl::StrCat(
        "the checkpoint is of shard ", checkpoint.shard, " of ",
        checkpoint.num_shards, " with ", checkpoint.num_workers,
        " workers; this server is shard ", options_.shard, " of ",
        options_.num_shards, " with ", options_.num_workers, " workers"));
  }
  return absl::OkStatus();
}

absl::Status StepBarriers::RestoreInto(const Layout& layout,
                                       const ShardCheckpoint& checkpoint) {
  const std::vector<ChunkBarrier*>& owned = layout.owned;
  if (owned.size() != checkpoint.chunks.size()) {
    return absl::FailedPreconditionError(
        absl::StrCat("the checkpoint holds ", checkpoint.chunks.size(),
                     " chunks, this shard owns ", owned.size()));
  }
  for (size_t i = 0; i < owned.size(); ++i) {
    if (owned[i]->chunk().index != checkpoint.chunks[i].chunk) {
      return absl::FailedPreconditionError(
          absl::StrCat("the checkpoint's chunk ", checkpoint.chunks[i].chunk,
                       " is not this shard's chunk ", owned[i]->chunk().index));
    }
    RETURN_IF_ERROR(owned[i]->Restore(checkpoint.chunks[i]));
  }
  return absl::OkStatus();
}

absl::Status StepBarriers::Restore(const ShardCheckpoint& checkpoint) {
  absl::MutexLock lock(&mu_);
  if (signature_.has_value()) {
    return absl::FailedPreconditionError(
        "a checkpoint is restored only before any worker registers");
  }
  RETURN_IF_ERROR(CheckCheckpointPlace(checkpoint));
  RETURN_IF_ERROR(ConfigureLocked(checkpoint.signature));
  RETURN_IF_ERROR(RestoreInto(*layout(), checkpoint));
  // The restored model is the job's: workers with another one are refused.
  signature_from_rank0_ = true;
  length_open_ = true;
  return absl::OkStatus();
}

absl::Status StepBarriers::StepBack(const ShardCheckpoint& checkpoint,
                                    int64_t from, Membership* members,
                                    Revocation* revoked) {
  absl::MutexLock lock(&mu_);
  if (shutting_down() || draining_) {
    return absl::UnavailableError("the server is stopping");
  }
  if (!signature_.has_value() || layout() == nullptr) {
    return absl::FailedPreconditionError("the shard holds no model yet");
  }
  if (signature_->sync.mode != SyncMode::kSync) {
    return absl::FailedPreconditionError(
        "only a synchronous job steps back to a common version");
  }
  const int64_t version = Version(layout());
  if (version < from) {
    // Another worker's request came first, or the job went on.
    return absl::AbortedError(
        absl::StrCat("shard ", options_.shard, " is at version ", version,
                     ", not at or past ", from, " any more: register again"));
  }
  if (checkpoint.version >= version) {
    return absl::InvalidArgumentError(
        absl::StrCat("a step back goes to an older version than ", version,
                     ", not to ", checkpoint.version));
  }
  RETURN_IF_ERROR(CheckCheckpointPlace(checkpoint));
  ModelSignature same_length = checkpoint.signature;
  same_length.total_steps = signature_->total_steps;
  if (std::string diff = DescribeDifference(*signature_, same_length);
      !diff.empty()) {
    return absl::FailedPreconditionError(
        absl::StrCat("the checkpoint of version ", checkpoint.version,
                     " holds another model: ", diff));
  }
  // Built and filled before anyone can see it; the members are revoked
  // before it is published, so that a push that passes the member check
  // still finds the old (closed) barriers, never the new ones.
  ASSIGN_OR_RETURN(std::unique_ptr<Layout> next,
                   BuildLayoutLocked(*signature_));
  RETURN_IF_ERROR(RestoreInto(*next, checkpoint));
  revoked->reason =
      absl::StrCat("shard ", options_.shard, " stepped back from version ",
                   version, " to ", checkpoint.version,
                   ", the newest version every shard holds: register again");
  members->RevokeAll(revoked->reason);
  revoked->barriers = layout()->owned;
  layouts_.push_back(std::move(next));
  layout_.store(layouts_.back().get(), std::memory_order_release);
  return absl::OkStatus();
}

StepBarriers::View StepBarriers::Current() const {
  View view;
  absl::MutexLock lock(&mu_);
  view.signature = signature_;
  const Layout* current = layout();
  view.version = Version(current);
  if (current != nullptr) view.owned = current->owned;
  return view;
}

void StepBarriers::ExpireGathering(const absl::Status& why) {
  const Layout* current = layout();
  if (current == nullptr) return;
  for (ChunkBarrier* c : current->owned) {
    if (std::optional<ChunkBarrier::Gathering> g = c->Pending()) {
      c->Expire(g->step, why);
    }
  }
}

void StepBarriers::StopNewSteps() {
  absl::MutexLock lock(&mu_);
  draining_ = true;
  int64_t limit = 0;
  const Layout* current = layout();
  if (current != nullptr && signature_->sync.mode == SyncMode::kSync) {
    // The step after the newest version: chunks behind it may still close
    // the step they gather.
    for (const ChunkBarrier* c : current->owned) {
      limit = std::max(limit, c->version());
    }
  }
  step_limit_.store(limit, std::memory_order_release);
}

void StepBarriers::Shutdown(const absl::Status& reason) {
  const Layout* current = nullptr;
  {
    absl::MutexLock lock(&mu_);
    shutting_down_.store(true, std::memory_order_release);
    current = layout();
  }
  if (current == nullptr) return;
  for (ChunkBarrier* c : current->owned) c->Close(reason);
}

}  // namespace lockstep
