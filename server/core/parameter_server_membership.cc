// ParameterServer's membership: the job's signature (rank 0's, or a
// provisional one until rank 0 comes), registration and incarnations, and
// the check every call of a member passes. The data path is
// parameter_server.cc.
#include "server/core/parameter_server.h"

#include <fcntl.h>
#include <malloc.h>
#include <sys/random.h>
#include <unistd.h>

#include <algorithm>
#include <cerrno>
#include <cstdint>
#include <utility>

#include "absl/strings/str_cat.h"
#include "common/status_macros.h"

namespace lockstep {
namespace {

absl::Status CheckSyncPolicy(const SyncPolicy& sync, int num_workers) {
  if (sync.mode == SyncMode::kAllReduce) {
    return absl::InvalidArgumentError(
        "a signature's sync mode is sync, async or ssp (an all-reduce job's "
        "is sync)");
  }
  if (sync.backup_workers < 0 || sync.backup_workers >= num_workers) {
    return absl::InvalidArgumentError(absl::StrCat(
        "backup_workers must be in [0, ", num_workers, "), got ",
        sync.backup_workers));
  }
  if (sync.backup_workers > 0 && sync.mode != SyncMode::kSync) {
    return absl::InvalidArgumentError(
        "backup_workers applies to sync mode only");
  }
  if (sync.staleness < 0) {
    return absl::InvalidArgumentError(
        absl::StrCat("staleness must not be negative, got ", sync.staleness));
  }
  return absl::OkStatus();
}

// A worker's incarnation is its credential for its rank's pushes: drawn at
// random (62 bits from the kernel's CSPRNG), not counted up, so that
// another worker cannot guess it and push or leave in that rank's name.
// Positive: 0 means "none".
absl::StatusOr<int64_t> RandomIncarnation() {
  uint64_t bits = 0;
  ssize_t got;
  do {
    got = getrandom(&bits, sizeof(bits), 0);
  } while (got < 0 && errno == EINTR);
  if (got != static_cast<ssize_t>(sizeof(bits))) {
    // No getrandom (an old kernel, a seccomp profile): the device.
    const int fd = open("/dev/urandom", O_RDONLY | O_CLOEXEC);
    got = fd < 0 ? -1 : read(fd, &bits, sizeof(bits));
    if (fd >= 0) close(fd);
    if (got != static_cast<ssize_t>(sizeof(bits))) {
      return absl::InternalError(
          "no random bytes for an incarnation (getrandom and /dev/urandom "
          "both failed)");
    }
  }
  return static_cast<int64_t>(bits >> 2) + 1;
}

}  // namespace

int64_t ShardStateBytes(int64_t elements, const OptimizerConfig& optimizer) {
  const int slots = optimizer.name == "sgd"        ? 0
                    : optimizer.name == "momentum" ? 1
                                                   : 2;
  return elements * static_cast<int64_t>(sizeof(float)) * (3 + slots);
}

absl::Status ParameterServer::ConfigureLocked(const ModelSignature& signature) {
  RETURN_IF_ERROR(CheckSyncPolicy(signature.sync, options_.num_workers));
  ASSIGN_OR_RETURN(ChunkPlan plan,
                   ChunkPlan::Create(signature.NumParameters(),
                                     signature.chunk_bytes,
                                     options_.num_shards,
                                     signature.NumStateElements()));
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
  std::vector<std::unique_ptr<ChunkBarrier>> chunks;
  for (const Chunk& chunk : plan.chunks()) {
    if (chunk.shard != options_.shard) {
      chunks.push_back(nullptr);  // Another shard's.
      continue;
    }
    ASSIGN_OR_RETURN(std::unique_ptr<Optimizer> optimizer,
                     Optimizer::Create(signature.optimizer, chunk.size));
    chunks.push_back(std::make_unique<ChunkBarrier>(
        chunk, signature.sync, options_.num_workers, std::move(optimizer),
        &counters_, options_.observer, options_.sum_order, options_.pool,
        options_.env));
  }
  // Barriers of an earlier, provisional configuration stay alive: a caller
  // may still hold a pointer to one (they are closed).
  for (auto& old : chunks_) retired_chunks_.push_back(std::move(old));
  chunks_ = std::move(chunks);
  signature_ = signature;
  plan_ = std::move(plan);
  return absl::OkStatus();
}

std::vector<ChunkBarrier*> ParameterServer::RevokeProvisionalLocked(
    const std::string& reason) {
  for (int r = 1; r < options_.num_workers; ++r) {
    if (incarnations_[r] != 0) {
      revoked_[incarnations_[r]] = absl::FailedPreconditionError(reason);
    }
    incarnations_[r] = 0;
  }
  return OwnedChunksLocked();
}

absl::StatusOr<Registration> ParameterServer::Register(
    int rank, const ModelSignature& signature) {
  std::vector<ChunkBarrier*> revoked;
  std::string reason;
  absl::StatusOr<Registration> result =
      RegisterInternal(rank, signature, &revoked, &reason);
  if (result.ok()) NoteContact(rank, options_.env->Now());
  // Old barriers: their waiting pulls learn why, and what they held (a
  // provisional model's weights and optimizer state) goes back.
  for (ChunkBarrier* b : revoked) {
    b->Close(absl::FailedPreconditionError(reason));
    b->ReleaseMemory();
  }
  if (!revoked.empty()) malloc_trim(0);  // Returned to the system, not kept.
  return result;
}

absl::Status ParameterServer::CheckRegistrationLocked(
    int rank, const ModelSignature& signature) const {
  if (shutting_down_) return absl::UnavailableError("server is shutting down");
  if (draining_) {
    // Its steps are over: a worker waits for the server that follows.
    return absl::UnavailableError(
        "the server is draining: it takes no new steps");
  }
  if (rank < 0 || rank >= options_.num_workers) {
    return absl::InvalidArgumentError(
        absl::StrCat("rank ", rank, " is outside [0, ",
                     options_.num_workers, ") for this job"));
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

absl::Status ParameterServer::AdoptSignatureLocked(
    int rank, const ModelSignature& signature,
    std::vector<ChunkBarrier*>* revoked, std::string* reason) {
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
  if (rank != 0 || signature_from_rank0_ || VersionLocked() >= 0) {
    return absl::FailedPreconditionError(
        absl::StrCat("model signature differs from the job's: ", diff));
  }
  // Rank 0 defines the model. Workers that registered another one before
  // it are refused now, rather than left waiting for a version 0 that
  // would not fit them.
  *reason = absl::StrCat("model signature differs from rank 0's: ",
                         DescribeDifference(signature, *signature_));
  *revoked = RevokeProvisionalLocked(*reason);
  return ConfigureLocked(signature);
}

absl::Status ParameterServer::ExtendLocked(int64_t total_steps) {
  const int64_t version = VersionLocked();
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

absl::StatusOr<Registration> ParameterServer::RegisterInternal(
    int rank, const ModelSignature& signature,
    std::vector<ChunkBarrier*>* revoked, std::string* reason) {
  absl::MutexLock lock(&mu_);
  RETURN_IF_ERROR(CheckRegistrationLocked(rank, signature));
  RETURN_IF_ERROR(AdoptSignatureLocked(rank, signature, revoked, reason));
  if (rank == 0) signature_from_rank0_ = true;
  length_open_ = false;
  Registration reg;
  do {
    ASSIGN_OR_RETURN(reg.incarnation, RandomIncarnation());
  } while (revoked_.contains(reg.incarnation) ||
           std::find(incarnations_.begin(), incarnations_.end(),
                     reg.incarnation) != incarnations_.end());
  if (incarnations_[rank] != 0) {
    // The one it replaces is told so from now on.
    revoked_[incarnations_[rank]] = absl::AlreadyExistsError(absl::StrCat(
        "rank ", rank, " incarnation ", incarnations_[rank],
        " was replaced: another worker registered as rank ", rank));
  }
  incarnations_[rank] = reg.incarnation;
  finished_[rank] = false;
  reg.version = VersionLocked();
  reg.must_initialize = rank == 0 && reg.version < 0;
  reg.server_incarnation = server_incarnation_;
  return reg;
}

absl::Status ParameterServer::CheckMemberLocked(int rank,
                                                int64_t incarnation) const {
  if (rank < 0 || rank >= options_.num_workers) {
    return absl::FailedPreconditionError(
        absl::StrCat("unknown rank ", rank, " (job has ",
                     options_.num_workers, " workers)"));
  }
  // The codes tell a worker what to do (see docs/faults.md): NOT_FOUND and
  // ABORTED mean "register again and continue", ALREADY_EXISTS (replaced),
  // PERMISSION_DENIED (never issued) and FAILED_PRECONDITION stop it.
  if (auto it = revoked_.find(incarnation); it != revoked_.end()) {
    return it->second;
  }
  if (incarnations_[rank] == 0) {
    return absl::NotFoundError(absl::StrCat(
        "rank ", rank, " is not registered with this server (server ",
        server_incarnation_, "); it may have restarted"));
  }
  if (incarnations_[rank] != incarnation) {
    // Never issued here for this rank (one that was, and was replaced, is
    // in revoked_). Not the current incarnation in the message: it is what
    // lets a call count for the rank.
    return absl::PermissionDeniedError(absl::StrCat(
        "rank ", rank, " incarnation ", incarnation,
        " was not issued by this server (server ", server_incarnation_,
        ") for rank ", rank,
        ": made up, another rank's, or from before this server started"));
  }
  return absl::OkStatus();
}

}  // namespace lockstep
