#include "worker/exchange/allreduce/ring_pipeline.h"

#include <climits>
#include <utility>

#include "absl/strings/str_cat.h"
#include "absl/time/clock.h"
#include "common/base/status_macros.h"
#include "common/model/chunk_plan.h"
#include "worker/exchange/allreduce/ring_plan.h"

namespace lockstep {
namespace {

// Chunks of the next all-reduce held until it starts. An honest left
// neighbour has at most its window (max_in_flight <= 64) in flight; the
// bound keeps a misbehaving one from holding unbounded memory.
constexpr size_t kMaxHeldChunks = 4096;

}  // namespace

// One outgoing chunk. Owned by its Run; the link uses the send until it has
// called back.
struct RingPipeline::Call {
  RingOp::SendId id;
  std::unique_ptr<RingSend> send;
};

// One AllReduceSum: the op and what of it runs outside the lock. Every
// field is guarded by the pipeline's mu_ (the op's Apply excepted).
struct RingPipeline::Run {
  explicit Run(RingOp op) : op(std::move(op)) {}

  RingOp op;
  // Calls taken off the op whose completion callback has not returned. A
  // call's thread may copy from the vector and start further calls until
  // then.
  int live_calls = 0;
  // Sink calls applying a received chunk to the vector (and starting the
  // calls it makes ready) outside the lock. The run and the vector stay
  // alive until this and live_calls are 0.
  int busy = 0;
  std::vector<std::unique_ptr<Call>> calls;  // Every call taken.
};

RingPipeline::RingPipeline(const AllReduceOptions& options, uint64_t session)
    : options_(options),
      left_rank_((options.rank + options.size - 1) % options.size),
      right_rank_((options.rank + 1) % options.size),
      session_(session) {}

RingPipeline::~RingPipeline() { Close(); }

void RingPipeline::Connect(RingLink* right, uint64_t left_session) {
  right_ = right;
  absl::MutexLock lock(&mu_);
  left_session_ = left_session;
}

void RingPipeline::Close() {
  std::vector<Held> held;
  {
    absl::MutexLock lock(&mu_);
    closing_ = true;
    held.swap(held_);
  }
  for (Held& h : held) h.done(ClosingError());
}

absl::Status RingPipeline::ClosingError() const {
  return absl::UnavailableError(
      absl::StrCat("rank ", options_.rank, " is closing its ring"));
}

absl::Status RingPipeline::AllReduceSum(absl::Span<float> data) {
  if (options_.size == 1) return absl::OkStatus();
  // Every rank computes the same chunk from the same vector size.
  const size_t chunk_elements =
      static_cast<size_t>(ResolveChunkBytes(options_.chunk_bytes,
                                            static_cast<int64_t>(data.size()),
                                            options_.size)) /
      sizeof(float);
  if (data.size() / chunk_elements >= static_cast<size_t>(INT32_MAX)) {
    return absl::InvalidArgumentError(absl::StrCat(
        data.size(), " floats make too many chunks of ", chunk_elements));
  }
  std::vector<Call*> to_start;
  std::vector<Held> earlier;
  ASSIGN_OR_RETURN(std::unique_ptr<Run> run,
                   BeginOp(data, chunk_elements, &to_start, &earlier));
  if (run == nullptr) return absl::OkStatus();
  StartCalls(*run, to_start);
  // Chunks that arrived before this op started; OnChunk now applies them
  // (or holds them again if they belong to a later op).
  for (Held& h : earlier) OnChunk(h.chunk, std::move(h.done));
  return FinishOp(std::move(run));
}

absl::StatusOr<std::unique_ptr<RingPipeline::Run>> RingPipeline::BeginOp(
    absl::Span<float> data, size_t chunk_elements, std::vector<Call*>* to_start,
    std::vector<Held>* earlier) {
  absl::MutexLock lock(&mu_);
  if (!broken_.ok()) {
    return absl::FailedPreconditionError(
        absl::StrCat("a previous ring all-reduce failed: ", broken_.message()));
  }
  auto run = std::make_unique<Run>(RingOp(
      next_op_++, data,
      RingPlan(options_.size, options_.rank, data.size(), chunk_elements),
      absl::Now() + options_.op_timeout));
  if (run->op.Finished()) return nullptr;  // Nothing to exchange.
  run_ = run.get();
  *to_start = PumpLocked(*run);
  earlier->swap(held_);
  return run;
}

absl::Status RingPipeline::FinishOp(std::unique_ptr<Run> run) {
  RingOp& op = run->op;
  std::vector<Call*> calls;
  {
    absl::MutexLock lock(&mu_);
    if (!mu_.AwaitWithDeadline(
            absl::Condition(this, &RingPipeline::RunFinishedOrFailed),
            op.deadline()) &&
        op.error().ok()) {
      op.Fail(absl::DeadlineExceededError(absl::StrCat(
          "ring all-reduce ", op.id(), " on rank ", options_.rank,
          " did not finish within ", absl::FormatDuration(options_.op_timeout),
          " (is every rank taking part?)")));
    }
    if (!op.error().ok()) {
      for (const auto& call : run->calls) calls.push_back(call.get());
    }
  }
  // A failed op cancels its outstanding sends (outside the lock, since it
  // may run callbacks; a send not started yet fails when it starts) and
  // waits until nothing of it runs any more.
  for (Call* call : calls) call->send->Cancel();
  std::vector<Held> later;
  absl::Status error;
  {
    absl::MutexLock lock(&mu_);
    mu_.Await(absl::Condition(this, &RingPipeline::RunQuiet));
    run_ = nullptr;
    if (op.error().ok()) return absl::OkStatus();
    error = op.error();
    broken_ = error;
    later.swap(held_);  // Chunks of later ops, which will never run.
  }
  for (Held& h : later) {
    h.done(absl::AbortedError(absl::StrCat(
        "rank ", options_.rank, "'s ring failed: ", error.message())));
  }
  return error;
}

bool RingPipeline::RunFinishedOrFailed() const {
  return run_->op.FinishedOrFailed();
}

bool RingPipeline::RunQuiet() const {
  return run_->busy == 0 && run_->live_calls == 0;
}

void RingPipeline::OnChunk(const RingChunkView& chunk, Done done) {
  Run* run = nullptr;
  absl::Status status;
  {
    absl::MutexLock lock(&mu_);
    if (closing_) {
      status = ClosingError();
    } else if (!broken_.ok()) {
      status = absl::AbortedError(absl::StrCat(
          "rank ", options_.rank, "'s ring failed: ", broken_.message()));
    } else if (chunk.sender_rank != left_rank_ ||
               (left_session_ != 0 && chunk.session != left_session_)) {
      // Not the left neighbour's traffic (another rank, a made-up or old
      // session): refused at once, neither held nor failing the op.
      status = absl::FailedPreconditionError(absl::StrCat(
          "rank ", options_.rank, " takes chunks from rank ", left_rank_,
          left_session_ != 0 ? absl::StrCat(" of session ", left_session_)
                             : std::string(),
          ", not from rank ", chunk.sender_rank, " of session ",
          chunk.session));
    } else if (run_ != nullptr && chunk.op == run_->op.id()) {
      status = AcceptLocked(*run_, chunk);
      if (status.ok()) run = run_;
    } else if (chunk.op >= next_op_ && held_.size() >= kMaxHeldChunks) {
      status = absl::ResourceExhaustedError(
          absl::StrCat("rank ", options_.rank, " holds ", held_.size(),
                       " early chunks already"));
    } else if (chunk.op >= next_op_) {
      held_.push_back(Held{chunk, std::move(done)});
      return;
    } else {
      status = absl::FailedPreconditionError(
          absl::StrCat("chunk of all-reduce ", chunk.op, " arrived at rank ",
                       options_.rank, ", which has finished it"));
    }
  }
  if (run == nullptr) return done(status);

  run->op.Apply(chunk);
  std::vector<Call*> to_start;
  {
    absl::MutexLock lock(&mu_);
    run->op.Applied(chunk);
    to_start = PumpLocked(*run);
  }
  StartCalls(*run, to_start);
  {
    absl::MutexLock lock(&mu_);
    --run->busy;  // From AcceptLocked. `run` may be gone after this.
  }
  done(absl::OkStatus());
}

absl::Status RingPipeline::AcceptLocked(Run& run, const RingChunkView& chunk) {
  RETURN_IF_ERROR(run.op.Accept(chunk, left_rank_, left_session_));
  ++run.busy;
  return absl::OkStatus();
}

std::vector<RingPipeline::Call*> RingPipeline::PumpLocked(Run& run) {
  std::vector<Call*> calls;
  for (const RingOp::SendId& id : run.op.TakeReady(options_.max_in_flight)) {
    auto call = std::make_unique<Call>();
    call->id = id;
    call->send = right_->NewSend();
    ++run.live_calls;
    calls.push_back(call.get());
    run.calls.push_back(std::move(call));
  }
  return calls;
}

void RingPipeline::StartCalls(Run& run, const std::vector<Call*>& calls) {
  const RingOp& op = run.op;
  for (Call* call : calls) {
    call->send->Start(op.HeaderOf(call->id, session_), op.ValuesOf(call->id),
                      op.deadline(), [this, &run, call](absl::Status status) {
                        OnSendDone(run, *call, std::move(status));
                      });
  }
}

void RingPipeline::OnSendDone(Run& run, Call& call, absl::Status status) {
  std::vector<Call*> to_start;
  {
    absl::MutexLock lock(&mu_);
    run.op.SendDone(status.ok());
    if (!status.ok()) {
      // This side cancels its calls only after the op failed (FinishOp), so
      // a CANCELLED here is the neighbour going away (its server shutting
      // down) with the chunk in flight, as a refused connection says.
      if (status.code() == absl::StatusCode::kCancelled) {
        status = absl::UnavailableError(status.message());
      }
      run.op.Fail(absl::Status(
          status.code(), absl::StrCat("sending chunk ", call.id.chunk,
                                      " of step ", call.id.step, " to rank ",
                                      right_rank_, ": ", status.message())));
    }
    to_start = PumpLocked(run);
  }
  StartCalls(run, to_start);
  absl::MutexLock lock(&mu_);
  --run.live_calls;  // `run` may be gone after this.
}

}  // namespace lockstep
