#include "worker/exchange/ps/push_step.h"

#include <algorithm>
#include <utility>

#include "absl/strings/str_cat.h"
#include "common/base/status_macros.h"
#include "common/wire/wire_dtype_proto.h"  // ChunkWireDType

namespace lockstep {
namespace ps_client_internal {

PushStep::PushStep(const PushTarget& target, int64_t step,
                   absl::Span<const float> gradient, absl::Span<float> weights,
                   absl::Time deadline)
    : target_(target),
      step_(step),
      gradient_(gradient),
      weights_(weights),
      deadline_(deadline),
      missing_(target.plan->num_chunks()),
      calls_(target.plan->num_chunks()),
      pending_(target.plan->num_chunks()),
      queued_(target.shards.size()),
      in_flight_(target.shards.size(), 0),
      failed_(target.shards.size(), false) {
  for (const Chunk& chunk : target_.plan->chunks()) {
    missing_[chunk.index] = chunk.size;
  }
}

PushStep::~PushStep() {
  if (finished_) return;
  // What was handed to the pusher goes as it would have on the caller's
  // thread: started, or queued behind its shard's window (dropped below).
  if (target_.pusher != nullptr) target_.pusher->WaitIdle();
  int dropped = 0;
  {
    absl::MutexLock lock(&mu_);
    abandoned_ = true;
    for (std::deque<int>& queue : queued_) {
      dropped += static_cast<int>(queue.size());
      queue.clear();
    }
  }
  for (int64_t& missing : missing_) {
    if (missing > 0) {
      missing = 0;
      ++dropped;
    }
  }
  for (int i = 0; i < dropped; ++i) pending_.DecrementCount();
  pending_.Wait();
}

void PushStep::GradientReady(int64_t begin, int64_t end) {
  const ChunkPlan& plan = *target_.plan;
  begin = std::max<int64_t>(begin, 0);
  end = std::min(end, plan.num_elements());
  if (begin >= end) return;
  const int64_t per_chunk = plan.elements_per_chunk();
  const int first = static_cast<int>(begin / per_chunk);
  const int last = static_cast<int>((end - 1) / per_chunk);
  for (int i = last; i >= first; --i) {
    const Chunk& chunk = plan.chunks()[i];
    const int64_t overlap = std::min(end, chunk.offset + chunk.size) -
                            std::max(begin, chunk.offset);
    int64_t& missing = missing_[i];
    if (missing <= 0) continue;
    missing -= overlap;
    if (missing <= 0) Dispatch(chunk.index);
  }
}

void PushStep::Dispatch(int index) {
  if (target_.pusher == nullptr) return Ready(index);
  target_.pusher->Submit([this, index] { Ready(index); });
}

absl::StatusOr<int64_t> PushStep::Finish() {
  const ChunkPlan& plan = *target_.plan;
  // The chunks not yet ready go in the order backprop readies them --
  // parameters, last first, then the state -- so that every worker's
  // windows wait on the same barriers even when this step's compute
  // stopped early.
  for (const bool state : {false, true}) {
    for (int i = plan.num_chunks() - 1; i >= 0; --i) {
      if (plan.chunks()[i].state == state && missing_[i] > 0) {
        missing_[i] = 0;
        Dispatch(i);
      }
    }
  }
  // Start() touches the step after its RPC is out, whose reply may be the
  // last: the pusher must be done with the step before pending_ may end it.
  // Its encoding and sending are counted as such, not as waiting.
  if (target_.pusher != nullptr) target_.pusher->WaitIdle();
  Env* const env = target_.env;
  const absl::Time wait_start = env->Now();
  pending_.Wait();
  target_.timings->wait_seconds +=
      absl::ToDoubleSeconds(env->Now() - wait_start);
  finished_ = true;
  return Result();
}

void PushStep::Ready(int index) {
  const Chunk& chunk = target_.plan->chunks()[index];
  Prepare(chunk);
  {
    absl::MutexLock lock(&mu_);
    if (abandoned_ || failed_[chunk.shard]) {
      pending_.DecrementCount();
      return;
    }
    if (target_.window > 0 && in_flight_[chunk.shard] >= target_.window) {
      queued_[chunk.shard].push_back(index);
      return;
    }
    ++in_flight_[chunk.shard];
  }
  Start(chunk, /*caller_thread=*/true);
}

void PushStep::Prepare(const Chunk& chunk) {
  Env* const env = target_.env;
  const absl::Time encode_start = env->Now();
  const absl::Span<const float> values =
      gradient_.subspan(chunk.offset, chunk.size);
  PushArgs args;
  args.rank = target_.rank;
  args.incarnation = target_.incarnations[chunk.shard];
  args.step = step_;
  args.chunk = chunk.index;
  args.dtype = ChunkWireDType(chunk, target_.wire_dtype);
  args.deadline = deadline_;
  args.slot = target_.slot;
  if (args.dtype == WireDType::kFloat32) {
    args.payload =
        absl::string_view(reinterpret_cast<const char*>(values.data()),
                          values.size() * sizeof(float));
  } else {
    std::string& encoded = (*target_.encoded)[chunk.index];
    EncodeTensor(values, args.dtype, &encoded);
    args.payload = encoded;
  }
  calls_[chunk.index].push = target_.shards[chunk.shard]->PreparePush(args);
  target_.timings->encode_seconds +=
      absl::ToDoubleSeconds(env->Now() - encode_start);
}

void PushStep::Start(const Chunk& chunk, bool caller_thread) {
  Call* c = &calls_[chunk.index];
  c->started = true;
  Env* const env = target_.env;
  const absl::Time send_start = env->Now();
  // The reply is decoded on the thread that completes the push as soon as
  // it arrives; chunks write disjoint ranges of the weights.
  const absl::Span<float> out = weights_.subspan(chunk.offset, chunk.size);
  const int index = chunk.index;
  const int shard = chunk.shard;
  const WireDType dtype = ChunkWireDType(chunk, target_.wire_dtype);
  target_.shards[shard]->StartPush(
      c->push.get(), [this, c, index, shard, out, dtype](
                         const absl::Status& status,
                         const absl::StatusOr<WeightsPieces>& reply) {
        c->status = status;
        if (status.ok()) {
          const absl::Time start = target_.env->Now();
          c->decoded = reply.ok() ? Decode(index, *reply, dtype, out, c)
                                  : reply.status();
          target_.decode_ns->fetch_add(
              absl::ToInt64Nanoseconds(target_.env->Now() - start),
              std::memory_order_relaxed);
        }
        Replied(index, shard);
        pending_.DecrementCount();
      });
  // Only the caller's time: a held-back push starts inside the wait.
  if (caller_thread) {
    target_.timings->send_seconds +=
        absl::ToDoubleSeconds(env->Now() - send_start);
  }
}

absl::Status PushStep::Decode(int index, const WeightsPieces& reply,
                              WireDType dtype, absl::Span<float> out,
                              Call* call) {
  if (target_.synchronous && reply.version < step_ + 1) {
    return absl::InternalError(
        absl::StrCat("push of chunk ", index, " was answered with version ",
                     reply.version, ", expected at least ", step_ + 1));
  }
  call->version = reply.version;
  return DecodePieces(reply.data, dtype, out);
}

void PushStep::Replied(int index, int shard) {
  const Call& call = calls_[index];
  int next = -1;
  int dropped = 0;
  {
    absl::MutexLock lock(&mu_);
    std::deque<int>& queue = queued_[shard];
    --in_flight_[shard];
    if (!call.status.ok()) {
      if (first_failure_.ok()) {
        const absl::Status& s = call.status;
        first_failure_ = absl::Status(
            s.code(), absl::StrCat("Push of step ", step_, " of chunk ", index,
                                   ": ", s.message()));
      }
      failed_[shard] = true;
      dropped = static_cast<int>(queue.size());
      queue.clear();
    } else if (!abandoned_ && !queue.empty()) {
      next = queue.front();
      queue.pop_front();
      ++in_flight_[shard];
    }
  }
  for (int i = 0; i < dropped; ++i) pending_.DecrementCount();
  if (next >= 0) Start(target_.plan->chunks()[next], /*caller_thread=*/false);
}

absl::StatusOr<int64_t> PushStep::Result() {
  {
    absl::MutexLock lock(&mu_);
    if (!first_failure_.ok()) return first_failure_;
  }
  absl::StatusOr<int64_t> result = absl::InternalError("a step without chunks");
  for (const Chunk& chunk : target_.plan->chunks()) {
    const Call& call = calls_[chunk.index];
    if (!call.started) {
      return absl::InternalError(absl::StrCat("chunk ", chunk.index,
                                              " of step ", step_,
                                              " was never pushed, and no "
                                              "push failed"));
    }
    RETURN_IF_ERROR(call.decoded);
    // Chunks may stand at different versions (with backup workers or
    // asynchronous modes); the step's result is the oldest.
    result = result.ok() ? std::min(*result, call.version) : call.version;
  }
  return result;
}

absl::StatusOr<int64_t> ShardPushes::Run(const PushTarget& base, int64_t step,
                                         absl::Span<const PushSlot> slots,
                                         absl::Span<const float> gradients,
                                         absl::Span<float> weights,
                                         absl::Time deadline) {
  const size_t n = weights.size();
  if (slots.empty() || gradients.size() < slots.size() * n) {
    return absl::InternalError(
        absl::StrCat(slots.size(), " batch shards' gradients need ",
                     slots.size() * n, " floats, got ", gradients.size()));
  }
  // Targets first: each PushStep keeps a reference to its own.
  targets_.assign(slots.size(), base);
  encoded_.resize(slots.size());
  replies_.resize(slots.size() - 1);
  std::vector<std::unique_ptr<PushStep>> steps;
  for (size_t k = 0; k < slots.size(); ++k) {
    encoded_[k].resize(base.plan->num_chunks());
    targets_[k].slot = slots[k];
    targets_[k].encoded = &encoded_[k];
    targets_[k].pusher = nullptr;  // Readied here, in order.
    absl::Span<float> into = weights;
    if (k > 0) {
      replies_[k - 1].resize(n);
      into = absl::MakeSpan(replies_[k - 1]);
    }
    steps.push_back(std::make_unique<PushStep>(
        targets_[k], step, gradients.subspan(k * n, n), into, deadline));
    steps.back()->GradientReady(0, static_cast<int64_t>(n));
  }
  absl::StatusOr<int64_t> result = absl::InternalError("no shard pushed");
  for (size_t k = 0; k < steps.size(); ++k) {
    absl::StatusOr<int64_t> version = steps[k]->Finish();
    if (k == 0 || (result.ok() && !version.ok())) {
      result = version;
    } else if (result.ok()) {
      result = std::min(*result, *version);
    }
  }
  return result;
}

}  // namespace ps_client_internal
}  // namespace lockstep
