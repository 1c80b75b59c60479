#include "worker/exchange/allreduce/ring_all_reducer.h"

#include <grpcpp/grpcpp.h>

#include <climits>
#include <deque>
#include <utility>

#include "absl/memory/memory.h"
#include "absl/strings/str_cat.h"
#include "common/base/status_macros.h"
#include "common/rpc/grpc_status.h"
#include "common/security/grpc_limits.h"
#include "common/security/tls.h"
#include "common/wire/wire_codec.h"
#include "lockstep/v1/ring.pb.h"
#include "worker/exchange/allreduce/coordinator_client.h"
#include "worker/exchange/allreduce/ring_plan.h"

namespace lockstep {
namespace {

// Chunks of the next all-reduce held until it starts. An honest left
// neighbour has at most its window (max_in_flight <= 64) in flight; the
// bound keeps a misbehaving one from holding unbounded memory.
constexpr size_t kMaxHeldChunks = 4096;

}  // namespace

// One outgoing chunk. Owned by its op; gRPC uses the context, request and
// response until the completion callback returns.
struct RingAllReducer::Call {
  int step = 0;
  int64_t chunk = 0;
  grpc::ClientContext context;
  v1::RingChunk request;
  v1::RingChunkAck response;
};

// One AllReduceSum. Every field but the constants is guarded by the
// reducer's mu_.
struct RingAllReducer::Op {
  Op(int64_t id, absl::Span<float> data, RingPlan plan, absl::Time deadline)
      : id(id), data(data), plan(plan), deadline(deadline) {
    receives_left = plan.NumReceives();
    sends_left = plan.NumSends();
    received.resize(plan.num_steps());
    for (int step = 0; step < plan.num_steps(); ++step) {
      received[step].assign(plan.NumChunks(plan.RecvSegment(step)), false);
    }
  }

  const int64_t id;
  const absl::Span<float> data;  // The caller's vector.
  const RingPlan plan;
  const absl::Time deadline;

  int64_t receives_left = 0;                  // Chunks not yet applied.
  int64_t sends_left = 0;                     // Chunks not yet acknowledged.
  std::deque<std::pair<int, int64_t>> ready;  // (step, chunk) to send.
  int window = 0;  // Sends started and not yet acknowledged.
  // Calls taken off `ready` whose completion callback has not returned. A
  // call's thread may copy from `data` and start further calls until then.
  int live_calls = 0;
  // Handlers applying a received chunk to `data` (and starting the calls it
  // makes ready) outside the lock. The op and `data` stay alive until this
  // and live_calls are 0.
  int busy = 0;
  std::vector<std::vector<bool>> received;   // By step, by chunk.
  std::vector<std::unique_ptr<Call>> calls;  // Every call started.
  absl::Status error;
};

absl::Status RingAllReducer::AllReduceSum(absl::Span<float> data) {
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
  ASSIGN_OR_RETURN(std::unique_ptr<Op> op,
                   BeginOp(data, chunk_elements, &to_start, &earlier));
  if (op == nullptr) return absl::OkStatus();
  StartCalls(*op, to_start);
  // Chunks that arrived before this op started; OnChunk now applies them
  // (or holds them again if they belong to a later op).
  for (Held& h : earlier) OnChunk(h.chunk, std::move(h.done));
  return FinishOp(std::move(op));
}

absl::StatusOr<std::unique_ptr<RingAllReducer::Op>> RingAllReducer::BeginOp(
    absl::Span<float> data, size_t chunk_elements, std::vector<Call*>* to_start,
    std::vector<Held>* earlier) {
  absl::MutexLock lock(&mu_);
  if (!broken_.ok()) {
    return absl::FailedPreconditionError(
        absl::StrCat("a previous ring all-reduce failed: ", broken_.message()));
  }
  auto op = std::make_unique<Op>(
      next_op_++, data,
      RingPlan(options_.size, options_.rank, data.size(), chunk_elements),
      absl::Now() + options_.op_timeout);
  if (op->receives_left == 0 && op->sends_left == 0) {
    return nullptr;  // Nothing to exchange (an empty vector).
  }
  op_ = op.get();
  const int first = op->plan.SendSegment(0);
  for (int64_t c = 0; c < op->plan.NumChunks(first); ++c) {
    op->ready.emplace_back(0, c);
  }
  *to_start = PumpLocked(*op);
  earlier->swap(held_);
  return op;
}

absl::Status RingAllReducer::FinishOp(std::unique_ptr<Op> op) {
  std::vector<Call*> calls;
  {
    absl::MutexLock lock(&mu_);
    if (!mu_.AwaitWithDeadline(
            absl::Condition(this, &RingAllReducer::OpFinishedOrFailed),
            op->deadline) &&
        op->error.ok()) {
      FailLocked(*op, absl::DeadlineExceededError(absl::StrCat(
                          "ring all-reduce ", op->id, " on rank ",
                          options_.rank, " did not finish within ",
                          absl::FormatDuration(options_.op_timeout),
                          " (is every rank taking part?)")));
    }
    if (!op->error.ok()) {
      for (const auto& call : op->calls) calls.push_back(call.get());
    }
  }
  // A failed op cancels its outstanding sends (TryCancel is safe before a
  // call starts, and outside the lock, since it may run callbacks) and waits
  // until nothing of it runs any more.
  for (Call* call : calls) call->context.TryCancel();
  std::vector<Held> later;
  {
    absl::MutexLock lock(&mu_);
    mu_.Await(absl::Condition(this, &RingAllReducer::OpQuiet));
    op_ = nullptr;
    if (op->error.ok()) return absl::OkStatus();
    broken_ = op->error;
    later.swap(held_);  // Chunks of later ops, which will never run.
  }
  for (Held& h : later) {
    h.done(absl::AbortedError(absl::StrCat(
        "rank ", options_.rank, "'s ring failed: ", op->error.message())));
  }
  return op->error;
}

bool RingAllReducer::OpFinishedOrFailed() const {
  return !op_->error.ok() || (op_->receives_left == 0 && op_->sends_left == 0);
}

bool RingAllReducer::OpQuiet() const {
  return op_->busy == 0 && op_->live_calls == 0;
}

void RingAllReducer::OnChunk(const RingChunkView& chunk, Done done) {
  Op* op = nullptr;
  absl::Status status;
  {
    absl::MutexLock lock(&mu_);
    if (closing_) {
      status = ClosingError();
    } else if (!broken_.ok()) {
      status = absl::AbortedError(absl::StrCat(
          "rank ", options_.rank, "'s ring failed: ", broken_.message()));
    } else if (op_ != nullptr && chunk.op == op_->id) {
      status = AcceptLocked(*op_, chunk);
      if (status.ok()) op = op_;
    } else if (chunk.op >= next_op_ && held_.size() >= kMaxHeldChunks) {
      status = absl::ResourceExhaustedError(absl::StrCat(
          "rank ", options_.rank, " holds ", held_.size(),
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
  if (op == nullptr) return done(status);

  const RingPlan& plan = op->plan;
  const RingPlan::Range range =
      plan.Chunk(plan.RecvSegment(chunk.step), chunk.chunk);
  absl::Span<float> target = op->data.subspan(range.offset, range.size);
  if (plan.IsReduceStep(chunk.step)) {
    AccumulateTensor(chunk.data, WireDType::kFloat32, target);
  } else {
    DecodeFloat32(chunk.data, target).IgnoreError();  // Size was checked.
  }
  std::vector<Call*> to_start;
  {
    absl::MutexLock lock(&mu_);
    --op->receives_left;
    if (chunk.step + 1 < plan.num_steps()) {
      op->ready.emplace_back(chunk.step + 1, chunk.chunk);
    }
    to_start = PumpLocked(*op);
  }
  StartCalls(*op, to_start);
  {
    absl::MutexLock lock(&mu_);
    --op->busy;  // From AcceptLocked. `op` may be gone after this.
  }
  done(absl::OkStatus());
}

absl::Status RingAllReducer::AcceptLocked(Op& op, const RingChunkView& chunk) {
  absl::Status status;
  const RingPlan& plan = op.plan;
  if (!op.error.ok()) {
    return absl::AbortedError(absl::StrCat(
        "rank ", options_.rank, "'s all-reduce failed: ", op.error.message()));
  }
  if (chunk.sender_rank != left_rank_) {
    status = absl::FailedPreconditionError(
        absl::StrCat("rank ", options_.rank, " takes chunks from rank ",
                     left_rank_, ", not from rank ", chunk.sender_rank));
  } else if (chunk.session != left_session_) {
    status = absl::FailedPreconditionError(
        absl::StrCat("chunk from a stale session of rank ", chunk.sender_rank));
  } else if (chunk.total_elements !=
             static_cast<int64_t>(plan.num_elements())) {
    status = absl::InvalidArgumentError(absl::StrCat(
        "rank ", chunk.sender_rank, " all-reduces ", chunk.total_elements,
        " floats, rank ", options_.rank, " ", plan.num_elements()));
  } else if (chunk.step < 0 || chunk.step >= plan.num_steps()) {
    status = absl::InvalidArgumentError(
        absl::StrCat("ring step ", chunk.step, " out of range"));
  } else if (chunk.chunk < 0 ||
             chunk.chunk >=
                 static_cast<int64_t>(op.received[chunk.step].size())) {
    status = absl::InvalidArgumentError(absl::StrCat(
        "chunk ", chunk.chunk, " of step ", chunk.step, " out of range"));
  } else if (op.received[chunk.step][chunk.chunk]) {
    status = absl::InvalidArgumentError(
        absl::StrCat("duplicate chunk ", chunk.chunk, " of step ", chunk.step));
  } else {
    const size_t expected =
        plan.Chunk(plan.RecvSegment(chunk.step), chunk.chunk).size *
        sizeof(float);
    if (chunk.data.size() != expected) {
      status = absl::InvalidArgumentError(
          absl::StrCat("chunk ", chunk.chunk, " of step ", chunk.step, " has ",
                       chunk.data.size(), " bytes, expected ", expected));
    }
  }
  if (!status.ok()) {
    FailLocked(op, status);
    return status;
  }
  op.received[chunk.step][chunk.chunk] = true;
  ++op.busy;
  return absl::OkStatus();
}

std::vector<RingAllReducer::Call*> RingAllReducer::PumpLocked(Op& op) {
  std::vector<Call*> calls;
  while (op.error.ok() && !op.ready.empty() &&
         op.window < options_.max_in_flight) {
    auto call = std::make_unique<Call>();
    call->step = op.ready.front().first;
    call->chunk = op.ready.front().second;
    op.ready.pop_front();
    ++op.window;
    ++op.live_calls;
    calls.push_back(call.get());
    op.calls.push_back(std::move(call));
  }
  return calls;
}

void RingAllReducer::StartCalls(Op& op, const std::vector<Call*>& calls) {
  const RingPlan& plan = op.plan;
  for (Call* call : calls) {
    v1::RingChunk& request = call->request;
    request.set_sender_rank(options_.rank);
    request.set_session(session_);
    request.set_op(op.id);
    request.set_step(call->step);
    request.set_chunk(static_cast<int32_t>(call->chunk));
    request.set_total_elements(static_cast<int64_t>(plan.num_elements()));
    const RingPlan::Range range =
        plan.Chunk(plan.SendSegment(call->step), call->chunk);
    EncodeFloat32(op.data.subspan(range.offset, range.size),
                  request.mutable_data());
    call->context.set_deadline(absl::ToChronoTime(op.deadline));
    // Fail fast: the neighbour's service was up before it published its
    // address, so a refused connection means it went away (UNAVAILABLE),
    // not that it is still starting.
    call->context.set_wait_for_ready(false);
    right_stub_->async()->SendChunk(
        &call->context, &call->request, &call->response,
        [this, &op, call](grpc::Status status) {
          OnSendDone(op, *call, FromGrpcStatus(status));
        });
  }
}

void RingAllReducer::OnSendDone(Op& op, Call& call, absl::Status status) {
  call.request.clear_data();  // gRPC is done with it; free the copy now.
  std::vector<Call*> to_start;
  {
    absl::MutexLock lock(&mu_);
    --op.window;
    if (status.ok()) {
      --op.sends_left;
    } else {
      // This side cancels its calls only after the op failed (FinishOp), so
      // a CANCELLED here is the neighbour's server shutting down with the
      // chunk in flight: it went away, as a refused connection says.
      if (status.code() == absl::StatusCode::kCancelled) {
        status = absl::UnavailableError(status.message());
      }
      FailLocked(
          op, absl::Status(status.code(),
                           absl::StrCat("sending chunk ", call.chunk,
                                        " of step ", call.step, " to rank ",
                                        right_rank_, ": ", status.message())));
    }
    to_start = PumpLocked(op);
  }
  StartCalls(op, to_start);
  absl::MutexLock lock(&mu_);
  --op.live_calls;  // `op` may be gone after this.
}

void RingAllReducer::FailLocked(Op& op, absl::Status status) {
  if (op.error.ok()) op.error = std::move(status);
}

}  // namespace lockstep
