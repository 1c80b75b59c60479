#include "server/core/parameter_server.h"

#include <algorithm>
#include <cstdint>
#include <utility>

#include "absl/strings/str_cat.h"
#include "common/status_macros.h"
#include "common/wire_codec.h"
#include "server/core/push_checks.h"

namespace lockstep {
namespace {

// An id told apart from an earlier server's by the real clock, whatever
// clock the server runs on.
int64_t NewServerIncarnation() {
  return absl::ToUnixMicros(Env::Default()->Now());
}

}  // namespace

absl::StatusOr<std::unique_ptr<ParameterServer>> ParameterServer::Create(
    const ParameterServerOptions& options) {
  if (options.num_workers < 1) {
    return absl::InvalidArgumentError(absl::StrCat(
        "num_workers must be at least 1, got ", options.num_workers));
  }
  if (options.num_shards < 1 || options.shard < 0 ||
      options.shard >= options.num_shards) {
    return absl::InvalidArgumentError(
        absl::StrCat("shard ", options.shard, " is outside [0, ",
                     options.num_shards, ")"));
  }
  return std::unique_ptr<ParameterServer>(new ParameterServer(options));
}

ParameterServer::ParameterServer(const ParameterServerOptions& options)
    : options_(options),
      server_incarnation_(NewServerIncarnation()),
      incarnations_(options.num_workers, 0),
      finished_(options.num_workers, false) {
  absl::MutexLock lock(&activity_mu_);
  activity_.resize(options.num_workers);
  step_started_.resize(options.num_workers);
  for (int r = 0; r < options.num_workers; ++r) activity_[r].rank = r;
}

ParameterServer::~ParameterServer() { Shutdown(); }

absl::StatusOr<ChunkBarrier*> ParameterServer::FindChunk(
    int rank, int64_t incarnation, int chunk, int64_t step,
    const PushSlot& slot) const {
  absl::MutexLock lock(&mu_);
  if (shutting_down_) return absl::UnavailableError("server is shutting down");
  RETURN_IF_ERROR(CheckMemberLocked(rank, incarnation));
  if (step >= step_limit_) {
    return absl::UnavailableError(
        "the server is draining: it takes no new steps");
  }
  RETURN_IF_ERROR(CheckSlotLocked(slot));
  return OwnedChunkLocked(chunk);
}

absl::StatusOr<ChunkBarrier*> ParameterServer::OwnedChunkLocked(
    int chunk) const {
  if (chunk < 0 || chunk >= static_cast<int>(chunks_.size())) {
    return absl::InvalidArgumentError(absl::StrCat(
        "chunk ", chunk, " is outside [0, ", chunks_.size(), ")"));
  }
  if (chunks_[chunk] == nullptr) {
    return absl::InvalidArgumentError(absl::StrCat(
        "chunk ", chunk, " belongs to shard ", plan_->chunks()[chunk].shard,
        ", not to this shard ", options_.shard));
  }
  return chunks_[chunk].get();
}

std::vector<ChunkBarrier*> ParameterServer::OwnedChunksLocked() const {
  std::vector<ChunkBarrier*> owned;
  for (const auto& c : chunks_) {
    if (c != nullptr) owned.push_back(c.get());
  }
  return owned;
}

int64_t ParameterServer::VersionLocked() const {
  int64_t version = -1;
  bool first = true;
  for (const auto& c : chunks_) {
    if (c == nullptr) continue;
    version = first ? c->version() : std::min(version, c->version());
    first = false;
  }
  return version;
}

absl::StatusOr<int64_t> ParameterServer::Initialize(
    int rank, int64_t incarnation, int chunk, absl::string_view fp32_bytes) {
  if (rank != 0) {
    return absl::FailedPreconditionError(
        absl::StrCat("only rank 0 initializes the weights, not rank ", rank));
  }
  ASSIGN_OR_RETURN(ChunkBarrier * barrier, FindChunk(rank, incarnation, chunk));
  NoteContact(rank, options_.env->Now());
  RETURN_IF_ERROR(
      CheckPayloadSize({fp32_bytes}, WireDType::kFloat32, barrier->chunk()));
  if (absl::Status finite = CheckFiniteEncoded(fp32_bytes, WireDType::kFloat32);
      !finite.ok()) {
    return NotFiniteError(barrier->chunk().index, finite);
  }
  RETURN_IF_ERROR(barrier->Initialize(fp32_bytes));
  absl::MutexLock lock(&mu_);
  return VersionLocked();
}

void ParameterServer::Push(int rank, int64_t incarnation, int64_t step,
                           int chunk, WireDType dtype,
                           absl::Span<const absl::string_view> payload,
                           ChunkCallback done, const PushSlot& slot) {
  const absl::Time arrival = options_.env->Now();
  absl::StatusOr<ChunkBarrier*> barrier =
      FindChunk(rank, incarnation, chunk, step, slot);
  absl::Status valid = barrier.status();
  if (valid.ok() && slot.generation > 0) {
    // A member's push of a newer generation than this shard has seen: the
    // group re-formed (only the first server hosts the coordinator), and a
    // step older ones gather here is given up, as there.
    NoteGeneration(slot.generation);
  }
  if (valid.ok()) {
    NoteContact(rank, arrival, step);
    // The size; the barrier checks the values as it sums them.
    valid = CheckPayloadSize(payload, dtype, (*barrier)->chunk());
  }
  if (!valid.ok()) return done(RefusePush(&counters_, std::move(valid)));
  // The barrier counts batch shards: a rank's own, or in an elastic job
  // the one the push carries.
  const int shard = slot.generation != 0 ? slot.batch_shard : rank;
  (*barrier)->Push(shard, step, dtype, payload, arrival, std::move(done));
}

void ParameterServer::Pull(int rank, int64_t incarnation, int chunk,
                           int64_t min_version, bool exact,
                           ChunkCallback done) {
  ChunkBarrier* barrier = nullptr;
  {
    absl::ReleasableMutexLock lock(&mu_);
    absl::Status status;
    if (shutting_down_) {
      status = absl::UnavailableError("server is shutting down");
    } else if (incarnation != 0) {
      status = CheckMemberLocked(rank, incarnation);
    }
    if (status.ok() && !signature_.has_value()) {
      status = absl::FailedPreconditionError(
          "no worker has registered yet, so there is no model");
    }
    if (status.ok()) {
      absl::StatusOr<ChunkBarrier*> owned = OwnedChunkLocked(chunk);
      status = owned.status();
      if (owned.ok()) barrier = *owned;
    }
    if (!status.ok()) {
      lock.Release();
      return done(status);
    }
  }
  if (incarnation != 0) NoteContact(rank, options_.env->Now());
  barrier->Pull(min_version, exact, std::move(done));
}

absl::Status ParameterServer::Leave(int rank, int64_t incarnation) {
  int64_t regroup = 0;
  bool elastic = false;
  {
    absl::MutexLock lock(&mu_);
    if (incarnation == 0 && rank >= 0 && rank < options_.num_workers &&
        (incarnations_[rank] == 0 || finished_[rank])) {
      // An all-reduce worker: it never registered, the server only hosted
      // its rendezvous, and it leaves so the server can end with the job.
      // Or an elastic job's absent rank (evicted, or gone already), for
      // which the group that finishes leaves.
      finished_[rank] = true;
      return absl::OkStatus();
    }
    RETURN_IF_ERROR(CheckMemberLocked(rank, incarnation));
    finished_[rank] = true;
    // An elastic job's member leaves: the others re-form without it (the
    // shard hosting the coordinator requires the next generation; the
    // others give their step up, which may wait for the leaver's shard).
    elastic = seen_generation_ > 0;
    if (min_generation_ > 0) regroup = min_generation_ + 1;
  }
  NoteContact(rank, options_.env->Now());
  if (regroup > 0) {
    RequireGeneration(regroup);
  } else if (elastic) {
    GiveUpGathering(absl::AbortedError(absl::StrCat(
        "rank ", rank, " left the worker group; this step was not applied, "
        "join the group again and push it again")));
  }
  return absl::OkStatus();
}

absl::Status ParameterServer::CheckSlotLocked(const PushSlot& slot) const {
  if (slot.generation == 0) return absl::OkStatus();
  if (slot.generation < 0 || slot.batch_shard < 0 ||
      slot.batch_shard >= options_.num_workers) {
    return absl::InvalidArgumentError(
        absl::StrCat("group generation ", slot.generation, " batch shard ",
                     slot.batch_shard, ": the shard must be in [0, ",
                     options_.num_workers, ") and the generation positive"));
  }
  if (!signature_.has_value() || signature_->sync.mode != SyncMode::kSync ||
      signature_->sync.backup_workers != 0) {
    return absl::FailedPreconditionError(
        "elastic pushes (a group generation) need the workers' --sync=ps "
        "without --backup_workers");
  }
  if (slot.generation < min_generation_) {
    return absl::AbortedError(
        absl::StrCat("the worker group re-forms (generation ", min_generation_,
                     ", this push's is ", slot.generation,
                     "): a worker joins or leaves; join the group again"));
  }
  return absl::OkStatus();
}

void ParameterServer::RequireGeneration(int64_t generation) {
  {
    absl::MutexLock lock(&mu_);
    if (generation <= min_generation_) return;
    min_generation_ = generation;
    seen_generation_ = std::max(seen_generation_, generation);
  }
  GiveUpGathering(ReformingError(generation));
}

void ParameterServer::NoteGeneration(int64_t generation) {
  {
    absl::MutexLock lock(&mu_);
    if (generation <= seen_generation_) return;
    seen_generation_ = generation;
  }
  GiveUpGathering(ReformingError(generation));
}

absl::Status ParameterServer::ReformingError(int64_t generation) {
  return absl::AbortedError(absl::StrCat(
      "the worker group re-forms (generation ", generation,
      "): a worker joins or leaves; this step was not applied, join the "
      "group again and push it again"));
}

void ParameterServer::GiveUpGathering(const absl::Status& why) {
  std::vector<ChunkBarrier*> chunks;
  {
    absl::MutexLock lock(&mu_);
    chunks = OwnedChunksLocked();
  }
  for (ChunkBarrier* c : chunks) {
    if (std::optional<ChunkBarrier::Gathering> g = c->Pending()) {
      c->Expire(g->step, why);
    }
  }
}

void ParameterServer::NoteContact(int rank, absl::Time when,
                                  int64_t pushed_step) {
  absl::MutexLock lock(&activity_mu_);
  if (rank < 0 || rank >= static_cast<int>(activity_.size())) return;
  WorkerActivity& a = activity_[rank];
  a.last_contact = std::max(a.last_contact, when);
  if (pushed_step <= a.last_step) return;  // Not a push, or not a new step.
  if (pushed_step == a.last_step + 1 && a.last_step >= 0) {
    a.last_step_time = when - step_started_[rank];
  }
  a.last_step = pushed_step;
  step_started_[rank] = when;
}

ServerStatus ParameterServer::GetStatus() const {
  ServerStatus status;
  std::vector<ChunkBarrier*> chunks;
  {
    absl::MutexLock lock(&mu_);
    status.version = VersionLocked();
    status.num_workers = options_.num_workers;
    status.server_incarnation = server_incarnation_;
    status.signature = signature_;
    status.shard = options_.shard;
    status.num_shards = options_.num_shards;
    for (int r = 0; r < options_.num_workers; ++r) {
      if (incarnations_[r] != 0) status.registered_ranks.push_back(r);
      if (finished_[r]) status.finished_ranks.push_back(r);
    }
    chunks = OwnedChunksLocked();
  }
  status.num_chunks = static_cast<int>(chunks.size());
  // A rank has pushed step `version` when every chunk still gathering that
  // step holds its gradient (chunks already past it had all they needed).
  for (int r = 0; r < options_.num_workers && status.version >= 0; ++r) {
    bool pushed = true;
    for (ChunkBarrier* c : chunks) {
      if (c->version() == status.version && !c->HasPushed(r)) pushed = false;
    }
    if (pushed) status.pushed_ranks.push_back(r);
  }
  ServerCounters& c = status.counters;
  auto seconds = [](const std::atomic<int64_t>& ns) {
    return static_cast<double>(ns.load(std::memory_order_relaxed)) * 1e-9;
  };
  c.pushes_accepted = counters_.pushes_accepted.load();
  c.pushes_refused = counters_.pushes_refused.load();
  c.pushes_dropped_late = counters_.pushes_dropped_late.load();
  c.chunk_steps = counters_.chunk_steps.load();
  c.accumulate_seconds = seconds(counters_.accumulate_ns);
  c.apply_seconds = seconds(counters_.apply_ns);
  c.barrier_wait_seconds = seconds(counters_.barrier_wait_ns);
  c.bytes_received = counters_.bytes_received.load();
  c.bytes_sent = bytes_sent_.load(std::memory_order_relaxed);
  for (int code = 0; code < BarrierCounters::kStatusCodes; ++code) {
    const int64_t n = counters_.pushes_refused_by_code[code].load();
    if (n > 0) {
      c.pushes_refused_by_code.emplace_back(static_cast<absl::StatusCode>(code),
                                            n);
    }
  }
  status.now = options_.env->Now();
  absl::MutexLock lock(&activity_mu_);
  status.workers = activity_;
  return status;
}

bool ParameterServer::WaitUntilDone(absl::Duration timeout) const {
  absl::MutexLock lock(&mu_);
  auto all_left = [this]() ABSL_EXCLUSIVE_LOCKS_REQUIRED(mu_) {
    return std::all_of(finished_.begin(), finished_.end(),
                       [](bool f) { return f; });
  };
  return mu_.AwaitWithTimeout(absl::Condition(&all_left), timeout);
}

void ParameterServer::StopNewSteps() {
  absl::MutexLock lock(&mu_);
  draining_ = true;
  step_limit_ = 0;
  if (!signature_.has_value() ||
      signature_->sync.mode != SyncMode::kSync) {
    return;
  }
  // The step after the newest version: chunks behind it may still close
  // the step they gather.
  for (ChunkBarrier* c : OwnedChunksLocked()) {
    step_limit_ = std::max(step_limit_, c->version());
  }
}

void ParameterServer::Shutdown(const absl::Status& reason) {
  std::vector<ChunkBarrier*> chunks;
  {
    absl::MutexLock lock(&mu_);
    shutting_down_ = true;
    chunks = OwnedChunksLocked();
  }
  for (ChunkBarrier* c : chunks) c->Close(reason);
}

}  // namespace lockstep
