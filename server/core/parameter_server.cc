#include "server/core/parameter_server.h"

#include <malloc.h>

#include <cstdint>
#include <utility>

#include "absl/strings/str_cat.h"
#include "common/base/status_macros.h"
#include "common/wire/wire_codec.h"
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
    return absl::InvalidArgumentError(absl::StrCat(
        "shard ", options.shard, " is outside [0, ", options.num_shards, ")"));
  }
  return std::unique_ptr<ParameterServer>(new ParameterServer(options));
}

ParameterServer::ParameterServer(const ParameterServerOptions& options)
    : options_(options),
      members_(options.num_workers, NewServerIncarnation()),
      barriers_(options, &counters_),
      generations_(options.num_workers),
      recovery_(options, &barriers_, &members_),
      activity_(options.num_workers),
      metrics_(options.num_workers) {}

ParameterServer::~ParameterServer() { Shutdown(); }

absl::StatusOr<Registration> ParameterServer::Register(
    int rank, const ModelSignature& signature) {
  StepBarriers::Revocation revoked;
  absl::StatusOr<Registration> result =
      barriers_.Register(rank, signature, &members_, &revoked);
  if (result.ok()) activity_.Note(rank, options_.env->Now());
  // Old barriers: their waiting pulls learn why, and what they held (a
  // provisional model's weights and optimizer state) goes back.
  for (ChunkBarrier* b : revoked.barriers) {
    b->Close(absl::FailedPreconditionError(revoked.reason));
    b->ReleaseMemory();
  }
  if (!revoked.barriers.empty()) malloc_trim(0);  // To the system, not kept.
  return result;
}

bool ParameterServer::PinsCheckpoints() const {
  const StepBarriers::Layout* layout = barriers_.layout();
  return options_.checkpoint_every_steps > 0 && layout != nullptr &&
         layout->sync.mode == SyncMode::kSync;
}

int64_t ParameterServer::PinsSkipped() const {
  int64_t skipped = 0;
  for (ChunkBarrier* c : barriers_.Current().owned)
    skipped += c->pins_skipped();
  return skipped;
}

absl::Status ParameterServer::StepBack(int rank, int64_t incarnation,
                                       int64_t from,
                                       const ShardCheckpoint& checkpoint) {
  RETURN_IF_ERROR(members_.Check(rank, incarnation));
  StepBarriers::Revocation revoked;
  RETURN_IF_ERROR(barriers_.StepBack(checkpoint, from, &members_, &revoked));
  // The old barriers' waiting pushes and pulls learn why; their memory goes.
  for (ChunkBarrier* b : revoked.barriers) {
    b->Close(absl::AbortedError(revoked.reason));
    b->ReleaseMemory();
  }
  malloc_trim(0);
  return absl::OkStatus();
}

absl::StatusOr<ChunkBarrier*> ParameterServer::FindChunk(
    int rank, int64_t incarnation, int chunk, int64_t step,
    const PushSlot& slot) const {
  // The layout before the member's check: a registration that overrules a
  // provisional signature revokes its ranks before it publishes the new
  // layout, so a rank that passes the check finds a barrier of the layout
  // it registered under (closed now, if overruled), never a newer one.
  const StepBarriers::Layout* layout = barriers_.layout();
  if (barriers_.shutting_down()) {
    return absl::UnavailableError("server is shutting down");
  }
  RETURN_IF_ERROR(members_.Check(rank, incarnation));
  if (step >= barriers_.step_limit()) {
    return absl::UnavailableError(
        "the server is draining: it takes no new steps");
  }
  RETURN_IF_ERROR(generations_.CheckSlot(
      slot, layout == nullptr ? nullptr : &layout->sync));
  ASSIGN_OR_RETURN(ChunkBarrier * barrier, barriers_.Owned(layout, chunk));
  // A step no longer possible (NoteFinished); a late push of a step the
  // chunk has applied (a backup worker's straggler) is answered as ever.
  if (step != kNotAPush && step >= barrier->version() &&
      steps_ended_.load(std::memory_order_acquire)) {
    absl::MutexLock lock(&ended_mu_);
    return steps_ended_why_;
  }
  return barrier;
}

absl::StatusOr<int64_t> ParameterServer::Initialize(
    int rank, int64_t incarnation, int chunk, absl::string_view fp32_bytes) {
  if (rank != 0) {
    return absl::FailedPreconditionError(
        absl::StrCat("only rank 0 initializes the weights, not rank ", rank));
  }
  ASSIGN_OR_RETURN(ChunkBarrier * barrier, FindChunk(rank, incarnation, chunk));
  activity_.Note(rank, options_.env->Now());
  RETURN_IF_ERROR(
      CheckPayloadSize({fp32_bytes}, WireDType::kFloat32, barrier->chunk()));
  if (absl::Status finite = CheckFiniteEncoded(fp32_bytes, WireDType::kFloat32);
      !finite.ok()) {
    return NotFiniteError(barrier->chunk().index, finite);
  }
  RETURN_IF_ERROR(barrier->Initialize(fp32_bytes));
  return StepBarriers::Version(barriers_.layout());
}

void ParameterServer::Push(int rank, int64_t incarnation, int64_t step,
                           int chunk, WireDType dtype,
                           absl::Span<const absl::string_view> payload,
                           ChunkCallback done, const PushSlot& slot) {
  const absl::Time arrival = options_.env->Now();
  absl::StatusOr<ChunkBarrier*> barrier =
      FindChunk(rank, incarnation, chunk, step, slot);
  absl::Status valid = barrier.status();
  if (valid.ok() && slot.generation > 0 && generations_.Note(slot.generation)) {
    // A member's push of a newer generation than this shard has seen: the
    // group re-formed (only the first server hosts the coordinator), and a
    // step older ones gather here is given up, as there.
    barriers_.ExpireGathering(
        GroupGenerations::ReformingError(slot.generation));
  }
  if (valid.ok()) {
    activity_.Note(rank, arrival, step, slot.report);
    // The size; the barrier checks the values as it sums them.
    valid = CheckPayloadSize(payload, dtype, (*barrier)->chunk());
  }
  if (!valid.ok()) return done(RefusePush(&counters_, std::move(valid)));
  // The barrier counts batch shards: a rank's own, or in an elastic job
  // the one the push carries.
  const int shard = slot.generation != 0 ? slot.batch_shard : rank;
  (*barrier)->Push(shard, step, dtype, payload, arrival, std::move(done));
}

void ParameterServer::RequireGeneration(int64_t generation) {
  if (generations_.Require(generation)) {
    barriers_.ExpireGathering(GroupGenerations::ReformingError(generation));
  }
}

void ParameterServer::Pull(int rank, int64_t incarnation, int chunk,
                           int64_t min_version, bool exact,
                           ChunkCallback done) {
  // The layout first, as in FindChunk.
  const StepBarriers::Layout* layout = barriers_.layout();
  absl::Status status;
  if (barriers_.shutting_down()) {
    status = absl::UnavailableError("server is shutting down");
  } else if (incarnation != 0) {
    status = members_.Check(rank, incarnation);
  }
  if (status.ok() && layout == nullptr) {
    status = absl::FailedPreconditionError(
        "no worker has registered yet, so there is no model");
  }
  ChunkBarrier* barrier = nullptr;
  if (status.ok()) {
    absl::StatusOr<ChunkBarrier*> owned = barriers_.Owned(layout, chunk);
    status = owned.status();
    if (owned.ok()) barrier = *owned;
  }
  if (!status.ok()) return done(status);
  if (incarnation != 0) activity_.Note(rank, options_.env->Now());
  barrier->Pull(min_version, exact, std::move(done));
}

absl::Status ParameterServer::Leave(int rank, int64_t incarnation,
                                    const LeaveNote& note) {
  ASSIGN_OR_RETURN(const bool member, members_.Leave(rank, incarnation, note));
  if (!member) return absl::OkStatus();
  metrics_.Leave(rank);
  // An elastic job's member leaves: the others re-form without it (the
  // shard hosting the coordinator requires the next generation; the
  // others give their step up, which may wait for the leaver's shard).
  const GroupGenerations::Leaving leaving = generations_.OnLeave();
  activity_.Note(rank, options_.env->Now());
  if (leaving.regroup > 0) {
    RequireGeneration(leaving.regroup);
  } else if (leaving.elastic) {
    barriers_.ExpireGathering(absl::AbortedError(
        absl::StrCat("rank ", rank,
                     " left the worker group; this step was not applied, "
                     "join the group again and push it again")));
  } else if (note.reason == LeaveReason::kFinished) {
    NoteFinished(rank);
  }
  return absl::OkStatus();
}

void ParameterServer::NoteFinished(int rank) {
  const StepBarriers::Layout* layout = barriers_.layout();
  // The asynchronous modes wait for nobody; a synchronous step waits for
  // all but backup_workers of the ranks.
  if (layout == nullptr || layout->sync.mode != SyncMode::kSync ||
      members_.Ends(LeaveReason::kFinished).size() <=
          static_cast<size_t>(layout->sync.backup_workers)) {
    return;
  }
  // When the ranks ran the same steps the others are done too and push
  // nothing more; otherwise nothing they push can complete a step.
  const absl::Status why = absl::FailedPreconditionError(absl::StrCat(
      "rank ", rank, " finished its training and left the job at version ",
      StepBarriers::Version(layout),
      ", and a synchronous step needs its gradient, so no later step can "
      "complete: the workers ran different numbers of steps (uneven data). "
      "Give every worker the same number of batches: lockstep.data.Shard, "
      "lockstep.torch.shard and lockstep.keras.shard drop the remainder; a "
      "DataLoader needs a DistributedSampler with drop_last=True"));
  {
    absl::MutexLock lock(&ended_mu_);
    if (steps_ended_.load(std::memory_order_relaxed)) return;
    steps_ended_why_ = why;
    steps_ended_.store(true, std::memory_order_release);
  }
  barriers_.ExpireGathering(why);
}

void ParameterServer::Average(int rank, int64_t incarnation, int64_t round,
                              const std::string& name,
                              std::vector<double> values,
                              MetricRounds::Callback done) {
  if (barriers_.shutting_down()) {
    return done(absl::UnavailableError("server is shutting down"));
  }
  if (absl::Status member = members_.Check(rank, incarnation); !member.ok()) {
    return done(member);
  }
  if (options_.shard != 0) {
    return done(absl::InvalidArgumentError(absl::StrCat(
        "averages are kept by shard 0, not shard ", options_.shard)));
  }
  activity_.Note(rank, options_.env->Now());
  metrics_.Contribute(rank, round, name, std::move(values), std::move(done));
}

ServerStatus ParameterServer::GetStatus() const {
  ServerStatus status;
  StepBarriers::View view = barriers_.Current();
  status.version = view.version;
  status.num_workers = options_.num_workers;
  status.server_incarnation = members_.server_incarnation();
  status.signature = std::move(view.signature);
  status.shard = options_.shard;
  status.num_shards = options_.num_shards;
  members_.Roster(&status.registered_ranks, &status.finished_ranks);
  const std::vector<ChunkBarrier*>& chunks = view.owned;
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
  status.workers = activity_.Get(status.now);
  return status;
}

absl::StatusOr<ShardCheckpoint> ParameterServer::Snapshot(
    absl::Duration timeout, bool lined_up) {
  return recovery_.Snapshot(timeout, lined_up);
}

absl::Status ParameterServer::Restore(const ShardCheckpoint& checkpoint) {
  return barriers_.Restore(checkpoint);
}

std::vector<ParameterServer::StepAlarm> ParameterServer::CheckStepTimeout(
    absl::Time now, absl::Duration timeout, bool fail_job) {
  return recovery_.CheckStepTimeout(now, timeout, fail_job);
}

bool ParameterServer::WaitUntilDone(absl::Duration timeout) const {
  return members_.WaitUntilAllLeft(timeout);
}

void ParameterServer::StopNewSteps() { barriers_.StopNewSteps(); }

void ParameterServer::Shutdown(const absl::Status& reason) {
  metrics_.Shutdown(reason);
  barriers_.Shutdown(reason);
}

}  // namespace lockstep
