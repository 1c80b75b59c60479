#include "server/parameter_server.h"

#include <algorithm>
#include <cstring>
#include <utility>

#include "absl/strings/str_cat.h"
#include "absl/time/clock.h"
#include "common/status_macros.h"
#include "common/wire_codec.h"

namespace lockstep {

// The barrier and weights of one chunk. `version` is the version of the
// chunk's weights; pushes for step == version are being gathered.
struct ParameterServer::ChunkState {
  Chunk chunk;
  absl::Mutex mu;
  std::vector<float> weights ABSL_GUARDED_BY(mu);  // Master, fp32.
  std::unique_ptr<Optimizer> optimizer ABSL_GUARDED_BY(mu);
  bool initialized ABSL_GUARDED_BY(mu) = false;
  int64_t version ABSL_GUARDED_BY(mu) = -1;
  std::vector<float> accumulator ABSL_GUARDED_BY(mu);
  std::vector<bool> pushed ABSL_GUARDED_BY(mu);  // By rank, for `version`.
  int num_pushed ABSL_GUARDED_BY(mu) = 0;
  absl::Time first_push ABSL_GUARDED_BY(mu);  // Of the step being gathered.
  std::vector<ChunkCallback> push_waiters ABSL_GUARDED_BY(mu);
  std::vector<std::pair<int64_t, ChunkCallback>> pull_waiters
      ABSL_GUARDED_BY(mu);
  std::shared_ptr<const std::vector<float>> published ABSL_GUARDED_BY(mu);
  bool closed ABSL_GUARDED_BY(mu) = false;

  ChunkSnapshot SnapshotLocked() const ABSL_EXCLUSIVE_LOCKS_REQUIRED(mu) {
    return ChunkSnapshot{chunk.index, version, published};
  }
};

namespace {

absl::Status CheckPayload(absl::Span<const absl::string_view> payload,
                          WireDType dtype, const Chunk& chunk) {
  const size_t bytes = PiecesSize(payload);
  const size_t expected =
      static_cast<size_t>(chunk.size) * BytesPerElement(dtype);
  if (bytes != expected) {
    return absl::InvalidArgumentError(absl::StrCat(
        "chunk ", chunk.index, " payload has ", bytes, " bytes, expected ",
        expected, " (", chunk.size, " ", WireDTypeName(dtype), " values)"));
  }
  absl::Status finite = CheckFinitePieces(payload, dtype);
  if (!finite.ok()) {
    return absl::InvalidArgumentError(
        absl::StrCat("chunk ", chunk.index, ": ", finite.message()));
  }
  return absl::OkStatus();
}

int64_t NewServerIncarnation() {
  return absl::ToUnixMicros(absl::Now());
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
      finished_(options.num_workers, false) {}

ParameterServer::~ParameterServer() { Shutdown(); }

absl::Status ParameterServer::ConfigureLocked(const ModelSignature& signature) {
  ASSIGN_OR_RETURN(ChunkPlan plan,
                   ChunkPlan::Create(signature.NumParameters(),
                                     signature.chunk_bytes,
                                     options_.num_shards));
  if (plan.num_chunks() == 0) {
    return absl::InvalidArgumentError("the model has no parameters");
  }
  // Validates the optimizer settings once, before any chunk exists.
  RETURN_IF_ERROR(Optimizer::Create(signature.optimizer, 0).status());
  // Chunk states of an earlier, provisional configuration stay alive: a
  // caller may still hold a pointer to one (they are closed and empty).
  for (auto& old : chunks_) retired_chunks_.push_back(std::move(old));
  chunks_.clear();
  num_owned_chunks_ = 0;
  for (const Chunk& chunk : plan.chunks()) {
    if (chunk.shard != options_.shard) {
      chunks_.push_back(nullptr);  // Another shard's.
      continue;
    }
    auto state = std::make_unique<ChunkState>();
    state->chunk = chunk;
    absl::MutexLock lock(&state->mu);
    ASSIGN_OR_RETURN(state->optimizer,
                     Optimizer::Create(signature.optimizer, chunk.size));
    state->weights.assign(chunk.size, 0.0f);
    state->accumulator.assign(chunk.size, 0.0f);
    state->pushed.assign(options_.num_workers, false);
    chunks_.push_back(std::move(state));
    ++num_owned_chunks_;
  }
  signature_ = signature;
  plan_ = std::move(plan);
  return absl::OkStatus();
}

std::vector<ParameterServer::ChunkCallback>
ParameterServer::RevokeProvisionalLocked(const std::string& reason) {
  for (int r = 1; r < options_.num_workers; ++r) {
    if (incarnations_[r] != 0) revoked_[incarnations_[r]] = reason;
    incarnations_[r] = 0;
  }
  std::vector<ChunkCallback> waiters;
  for (auto& c : chunks_) {
    if (c == nullptr) continue;
    absl::MutexLock lock(&c->mu);
    c->closed = true;
    for (auto& [min_version, cb] : c->pull_waiters) {
      waiters.push_back(std::move(cb));
    }
    c->pull_waiters.clear();
  }
  return waiters;
}

absl::StatusOr<Registration> ParameterServer::Register(
    int rank, const ModelSignature& signature) {
  std::vector<ChunkCallback> revoked;
  std::string reason;
  absl::StatusOr<Registration> result = RegisterInternal(rank, signature,
                                                       &revoked, &reason);
  for (ChunkCallback& cb : revoked) cb(absl::FailedPreconditionError(reason));
  return result;
}

absl::StatusOr<Registration> ParameterServer::RegisterInternal(
    int rank, const ModelSignature& signature,
    std::vector<ChunkCallback>* revoked, std::string* reason) {
  absl::MutexLock lock(&mu_);
  if (shutting_down_) return absl::UnavailableError("server is shutting down");
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
  if (!signature_.has_value()) {
    RETURN_IF_ERROR(ConfigureLocked(signature));
  } else if (const std::string diff =
                 DescribeDifference(*signature_, signature);
             !diff.empty()) {
    if (rank != 0 || signature_from_rank0_ || version_ >= 0) {
      return absl::FailedPreconditionError(
          absl::StrCat("model signature differs from the job's: ", diff));
    }
    // Rank 0 defines the model. Workers that registered another one before
    // it are refused now, rather than left waiting for a version 0 that
    // would not fit them.
    *reason = absl::StrCat("model signature differs from rank 0's: ",
                           DescribeDifference(signature, *signature_));
    *revoked = RevokeProvisionalLocked(*reason);
    RETURN_IF_ERROR(ConfigureLocked(signature));
  }
  if (rank == 0) signature_from_rank0_ = true;
  Registration reg;
  reg.incarnation = next_incarnation_++;
  incarnations_[rank] = reg.incarnation;
  finished_[rank] = false;
  reg.version = version_;
  reg.must_initialize = rank == 0 && version_ < 0;
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
  if (incarnations_[rank] == 0) {
    auto it = revoked_.find(incarnation);
    if (it != revoked_.end()) return absl::FailedPreconditionError(it->second);
    return absl::FailedPreconditionError(
        absl::StrCat("rank ", rank, " has not registered"));
  }
  if (incarnations_[rank] != incarnation) {
    return absl::FailedPreconditionError(absl::StrCat(
        "rank ", rank, " incarnation ", incarnation,
        " was replaced by incarnation ", incarnations_[rank]));
  }
  return absl::OkStatus();
}

absl::StatusOr<ParameterServer::ChunkState*> ParameterServer::FindChunk(
    int rank, int64_t incarnation, int chunk) const {
  absl::MutexLock lock(&mu_);
  if (shutting_down_) return absl::UnavailableError("server is shutting down");
  RETURN_IF_ERROR(CheckMemberLocked(rank, incarnation));
  return OwnedChunkLocked(chunk);
}

absl::StatusOr<ParameterServer::ChunkState*> ParameterServer::OwnedChunkLocked(
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

absl::StatusOr<int64_t> ParameterServer::Initialize(
    int rank, int64_t incarnation, int chunk, absl::string_view fp32_bytes) {
  if (rank != 0) {
    return absl::FailedPreconditionError(
        absl::StrCat("only rank 0 initializes the weights, not rank ", rank));
  }
  ASSIGN_OR_RETURN(ChunkState * state, FindChunk(rank, incarnation, chunk));
  RETURN_IF_ERROR(CheckPayload({fp32_bytes}, WireDType::kFloat32, state->chunk));
  std::vector<std::pair<int64_t, ChunkCallback>> pulls;
  ChunkSnapshot snapshot;
  {
    absl::MutexLock lock(&state->mu);
    if (state->initialized) {
      return absl::FailedPreconditionError(
          absl::StrCat("chunk ", chunk, " is already initialized"));
    }
    std::memcpy(state->weights.data(), fp32_bytes.data(), fp32_bytes.size());
    state->initialized = true;
    state->version = 0;
    state->published =
        std::make_shared<const std::vector<float>>(state->weights);
    snapshot = state->SnapshotLocked();
    pulls.swap(state->pull_waiters);
  }
  ChunkPublished(0);
  for (auto& [min_version, done] : pulls) done(snapshot);
  absl::MutexLock lock(&mu_);
  return version_;
}

void ParameterServer::Push(int rank, int64_t incarnation, int64_t step,
                           int chunk, WireDType dtype,
                           absl::Span<const absl::string_view> payload,
                           ChunkCallback done) {
  // Every early return below is a refused push.
  auto refuse = [this, &done](absl::Status status) {
    CountRefused();
    done(std::move(status));
  };
  absl::StatusOr<ChunkState*> found = FindChunk(rank, incarnation, chunk);
  if (!found.ok()) return refuse(found.status());
  ChunkState& state = **found;
  const absl::Time arrival = absl::Now();
  if (absl::Status s = CheckPayload(payload, dtype, state.chunk); !s.ok()) {
    return refuse(s);
  }
  std::vector<ChunkCallback> pushes;
  std::vector<std::pair<int64_t, ChunkCallback>> pulls;
  ChunkSnapshot snapshot;
  {
    absl::ReleasableMutexLock lock(&state.mu);
    if (state.closed) {
      lock.Release();
      return refuse(absl::UnavailableError("server is shutting down"));
    }
    if (!state.initialized) {
      lock.Release();
      return refuse(absl::FailedPreconditionError(absl::StrCat(
          "chunk ", chunk, " has no weights yet: rank 0 has not initialized")));
    }
    if (step == state.version - 1) {
      // A re-sent push of the step just applied (its answer was lost): every
      // rank was counted in it, so it gets the same answer again.
      snapshot = state.SnapshotLocked();
      lock.Release();
      return done(snapshot);
    }
    if (step != state.version) {
      const int64_t version = state.version;
      lock.Release();
      return refuse(absl::FailedPreconditionError(
          absl::StrCat("push for step ", step, " but chunk ", chunk,
                       " is at version ", version, "; expected step ",
                       version)));
    }
    state.push_waiters.push_back(std::move(done));
    if (state.pushed[rank]) return;  // Counted already: wait with the rest.
    AccumulatePieces(payload, dtype, absl::MakeSpan(state.accumulator));
    state.pushed[rank] = true;
    if (state.num_pushed == 0) state.first_push = arrival;
    const absl::Time summed = absl::Now();
    pushes_accepted_.fetch_add(1, std::memory_order_relaxed);
    bytes_received_.fetch_add(PiecesSize(payload), std::memory_order_relaxed);
    accumulate_ns_.fetch_add(absl::ToInt64Nanoseconds(summed - arrival),
                             std::memory_order_relaxed);
    if (++state.num_pushed < options_.num_workers) return;

    // The barrier is complete: average, step, publish.
    barrier_wait_ns_.fetch_add(
        absl::ToInt64Nanoseconds(summed - state.first_push),
        std::memory_order_relaxed);
    const float scale = 1.0f / static_cast<float>(options_.num_workers);
    for (float& g : state.accumulator) g *= scale;
    state.optimizer->Apply(step, 0, absl::MakeSpan(state.weights),
                           state.accumulator);
    std::fill(state.accumulator.begin(), state.accumulator.end(), 0.0f);
    std::fill(state.pushed.begin(), state.pushed.end(), false);
    state.num_pushed = 0;
    state.version = step + 1;
    state.published =
        std::make_shared<const std::vector<float>>(state.weights);
    snapshot = state.SnapshotLocked();
    pushes.swap(state.push_waiters);
    chunk_steps_.fetch_add(1, std::memory_order_relaxed);
    apply_ns_.fetch_add(absl::ToInt64Nanoseconds(absl::Now() - summed),
                        std::memory_order_relaxed);
    auto ready = std::stable_partition(
        state.pull_waiters.begin(), state.pull_waiters.end(),
        [&](const auto& p) { return p.first > state.version; });
    pulls.assign(std::make_move_iterator(ready),
                 std::make_move_iterator(state.pull_waiters.end()));
    state.pull_waiters.erase(ready, state.pull_waiters.end());
  }
  ChunkPublished(step + 1);
  for (ChunkCallback& cb : pushes) cb(snapshot);
  for (auto& [min_version, cb] : pulls) cb(snapshot);
}

void ParameterServer::ChunkPublished(int64_t version) {
  absl::MutexLock lock(&mu_);
  if (version != version_ + 1) return;
  if (++chunks_at_next_version_ == num_owned_chunks_) {
    version_ = version;
    chunks_at_next_version_ = 0;
  }
}

void ParameterServer::Pull(int rank, int64_t incarnation, int chunk,
                           int64_t min_version, ChunkCallback done) {
  ChunkState* state = nullptr;
  {
    absl::ReleasableMutexLock lock(&mu_);
    if (shutting_down_) {
      lock.Release();
      return done(absl::UnavailableError("server is shutting down"));
    }
    if (incarnation != 0) {
      if (absl::Status s = CheckMemberLocked(rank, incarnation); !s.ok()) {
        lock.Release();
        return done(s);
      }
    }
    if (!signature_.has_value()) {
      lock.Release();
      return done(absl::FailedPreconditionError(
          "no worker has registered yet, so there is no model"));
    }
    absl::StatusOr<ChunkState*> owned = OwnedChunkLocked(chunk);
    if (!owned.ok()) {
      lock.Release();
      return done(owned.status());
    }
    state = *owned;
  }
  ChunkSnapshot snapshot;
  {
    absl::ReleasableMutexLock lock(&state->mu);
    if (state->closed) {
      lock.Release();
      return done(absl::UnavailableError("server is shutting down"));
    }
    if (!state->initialized || state->version < min_version) {
      state->pull_waiters.emplace_back(min_version, std::move(done));
      return;
    }
    snapshot = state->SnapshotLocked();
  }
  done(snapshot);
}

absl::Status ParameterServer::Leave(int rank, int64_t incarnation) {
  absl::MutexLock lock(&mu_);
  RETURN_IF_ERROR(CheckMemberLocked(rank, incarnation));
  finished_[rank] = true;
  return absl::OkStatus();
}

ServerStatus ParameterServer::GetStatus() const {
  ServerStatus status;
  std::vector<ChunkState*> chunks;
  {
    absl::MutexLock lock(&mu_);
    status.version = version_;
    status.num_workers = options_.num_workers;
    status.num_chunks = num_owned_chunks_;
    status.server_incarnation = server_incarnation_;
    status.signature = signature_;
    status.shard = options_.shard;
    status.num_shards = options_.num_shards;
    for (int r = 0; r < options_.num_workers; ++r) {
      if (incarnations_[r] != 0) status.registered_ranks.push_back(r);
      if (finished_[r]) status.finished_ranks.push_back(r);
    }
    for (const auto& c : chunks_) {
      if (c != nullptr) chunks.push_back(c.get());
    }
  }
  // A rank has pushed step `version` when every chunk still gathering that
  // step holds its gradient (chunks already past it had all of them).
  std::vector<bool> pushed(options_.num_workers, status.version >= 0);
  for (ChunkState* c : chunks) {
    absl::MutexLock lock(&c->mu);
    if (c->version != status.version) continue;
    for (int r = 0; r < options_.num_workers; ++r) {
      if (!c->pushed[r]) pushed[r] = false;
    }
  }
  for (int r = 0; r < options_.num_workers; ++r) {
    if (pushed[r]) status.pushed_ranks.push_back(r);
  }
  ServerCounters& c = status.counters;
  auto seconds = [](const std::atomic<int64_t>& ns) {
    return static_cast<double>(ns.load(std::memory_order_relaxed)) * 1e-9;
  };
  c.pushes_accepted = pushes_accepted_.load(std::memory_order_relaxed);
  c.pushes_refused = pushes_refused_.load(std::memory_order_relaxed);
  c.chunk_steps = chunk_steps_.load(std::memory_order_relaxed);
  c.accumulate_seconds = seconds(accumulate_ns_);
  c.apply_seconds = seconds(apply_ns_);
  c.barrier_wait_seconds = seconds(barrier_wait_ns_);
  c.bytes_received = bytes_received_.load(std::memory_order_relaxed);
  c.bytes_sent = bytes_sent_.load(std::memory_order_relaxed);
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

void ParameterServer::Shutdown() {
  std::vector<ChunkState*> chunks;
  {
    absl::MutexLock lock(&mu_);
    shutting_down_ = true;
    for (const auto& c : chunks_) {
      if (c != nullptr) chunks.push_back(c.get());
    }
  }
  const absl::Status unavailable =
      absl::UnavailableError("server is shutting down");
  for (ChunkState* c : chunks) {
    std::vector<ChunkCallback> pushes;
    std::vector<std::pair<int64_t, ChunkCallback>> pulls;
    {
      absl::MutexLock lock(&c->mu);
      c->closed = true;
      pushes.swap(c->push_waiters);
      pulls.swap(c->pull_waiters);
    }
    for (ChunkCallback& cb : pushes) cb(unavailable);
    for (auto& [v, cb] : pulls) cb(unavailable);
  }
}

}  // namespace lockstep
