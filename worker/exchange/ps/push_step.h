// One step's gradient pushes for PsClient (ps_client.cc, its only user):
// which chunks are ready, the push window, and the replies decoded into
// the weights.
//
// Pushes go through each shard's ShardTransport (shard_transport.h): fp32
// gradients are sent from the caller's buffer, replies decoded from the
// transport's pieces (gRPC's slices, or the server's snapshot). At most
// `window` pushes are out to each shard at once. A chunk is encoded and
// framed when it becomes ready (on the caller's thread, or in order on the
// target's PushThread where it has one); if its shard's window is full it
// waits in the shard's queue, in the order chunks became ready, and each
// reply (on the thread that completes it) starts the next. Every worker
// readies its chunks in the same order (see Finish), so every barrier the
// windows wait on is one that every worker pushes to. A failed push stops
// its shard only: the other shards still get every chunk, which the other
// workers' pushes there are waiting for.
#ifndef LOCKSTEP_WORKER_EXCHANGE_PS_PUSH_STEP_H_
#define LOCKSTEP_WORKER_EXCHANGE_PS_PUSH_STEP_H_

#include <atomic>
#include <cstdint>
#include <deque>
#include <memory>
#include <string>
#include <vector>

#include "absl/base/thread_annotations.h"
#include "absl/status/status.h"
#include "absl/status/statusor.h"
#include "absl/synchronization/blocking_counter.h"
#include "absl/synchronization/mutex.h"
#include "absl/time/time.h"
#include "absl/types/span.h"
#include "common/base/env.h"
#include "common/model/chunk_plan.h"
#include "common/wire/wire_codec.h"
#include "worker/exchange/ps/ps_client.h"
#include "worker/exchange/ps/push_thread.h"
#include "worker/exchange/ps/shard_transport.h"

namespace lockstep {
namespace ps_client_internal {

// What every step pushes with; PsClient owns it, and it outlives the steps.
struct PushTarget {
  const ChunkPlan* plan = nullptr;
  std::vector<ShardTransport*> shards;  // By shard; not owned.
  int rank = -1;
  std::vector<int64_t> incarnations;  // By shard.
  // Parameters travel as wire_dtype, state chunks as fp32 (ChunkWireDType).
  WireDType wire_dtype = WireDType::kFloat32;
  int window = 0;           // Pushes out per shard; 0: no limit.
  // kSync: a push of step s is answered with version s + 1 or later (the
  // step's result). Async and SSP steps are the worker's own count, and a
  // server restored from a checkpoint answers lower versions.
  bool synchronous = true;
  // bf16/fp16 payloads by chunk (fp32 is sent in place), reused from step to
  // step: one step is in flight at a time, and its pushes are answered (or
  // the step destroyed) before the next step encodes. Fresh buffers cost a
  // page fault per 4 KiB and a zero fill every step.
  std::vector<std::string>* encoded = nullptr;
  // Where ready chunks are encoded and their pushes started, in order; null:
  // on the thread that readies them (GradientReady, Finish).
  PushThread* pusher = nullptr;
  // Client-side time (PushStep adds encode, send and wait; not steps) and,
  // from the threads that complete pushes, decoding; measured on env.
  StepTimings* timings = nullptr;
  std::atomic<int64_t>* decode_ns = nullptr;
  Env* env = Env::Default();
  // An elastic job's: the group generation and the batch shard pushed.
  PushSlot slot;
};

class PushStep final {
 public:
  // The step `step`: pushes chunks of `gradient` and decodes the replies
  // into `weights`; both must stay alive, and `gradient`'s ready ranges
  // unchanged, until Finish or destruction. Every push's deadline is
  // `deadline`.
  PushStep(const PushTarget& target, int64_t step,
           absl::Span<const float> gradient, absl::Span<float> weights,
           absl::Time deadline);
  // Without Finish (an abandoned step): drops what was not sent and waits
  // for the pushes already out, so no transport callback outlives the step.
  ~PushStep();
  PushStep(const PushStep&) = delete;
  PushStep& operator=(const PushStep&) = delete;

  int64_t step() const { return step_; }

  // gradient[begin, end) is final: pushes (or queues) every chunk that it
  // completes. Later chunks first: backprop produces the last layers first,
  // and their pushes have the longest to wait for.
  void GradientReady(int64_t begin, int64_t end);

  // Pushes the rest, waits for every reply and returns the first push
  // failure, a reply that did not decode, or the oldest version the replies
  // carry. Once.
  absl::StatusOr<int64_t> Finish();

 private:
  struct Call {
    std::unique_ptr<ShardTransport::PreparedPush> push;
    absl::Status status;   // The transport's outcome.
    absl::Status decoded;  // Outcome of decoding the reply's weights.
    int64_t version = 0;   // The reply's version.
    bool started = false;  // False: never sent (its shard failed first).
  };

  // Chunk `index` is ready: Ready(index) here, or on the pusher.
  void Dispatch(int index);
  // Frames chunk `index`'s push, then starts it if its shard's window has
  // room, else queues it; drops it when its shard has failed or the step
  // was abandoned.
  void Ready(int index);
  // Encodes and frames the push of `chunk` (the thread of Ready).
  void Prepare(const Chunk& chunk);
  // Starts the prepared push of `chunk` (any thread: a reply's callback
  // starts the next push of its shard; caller_thread: Ready's).
  void Start(const Chunk& chunk, bool caller_thread);
  // Checks and decodes the weights chunk `index`'s push was answered with
  // into `out`.
  absl::Status Decode(int index, const WeightsPieces& reply, WireDType dtype,
                      absl::Span<float> out, Call* call);
  // The push of chunk `index` to `shard` was answered (on the transport's
  // thread, before its pending count is released, so the step stays alive).
  void Replied(int index, int shard);
  absl::StatusOr<int64_t> Result();

  const PushTarget& target_;
  const int64_t step_;
  const absl::Span<const float> gradient_;
  const absl::Span<float> weights_;
  const absl::Time deadline_;
  std::vector<int64_t> missing_;  // Elements not yet ready, by chunk.
  // By chunk; each push (the transport's, one allocation) stays put until
  // it completes, as the transports require.
  std::vector<Call> calls_;
  absl::BlockingCounter pending_;  // Chunks not yet answered or dropped.
  bool finished_ = false;
  absl::Mutex mu_;
  std::vector<std::deque<int>> queued_ ABSL_GUARDED_BY(mu_);  // By shard.
  std::vector<int> in_flight_ ABSL_GUARDED_BY(mu_);           // By shard.
  std::vector<bool> failed_ ABSL_GUARDED_BY(mu_);             // By shard.
  bool abandoned_ ABSL_GUARDED_BY(mu_) = false;  // ~PushStep: push no more.
  // The failure that stopped a shard first: the step's result.
  absl::Status first_failure_ ABSL_GUARDED_BY(mu_);
};

// Several batch shards' pushes of one step at once (an elastic job's worker
// that covers absent ranks' shards): a PushStep for each, with its own
// target (the shard's slot) and encoded payloads, all readied before any
// reply is awaited, since each shard's barrier waits for the others.
// Reused from step to step.
class ShardPushes final {
 public:
  // Shard k's gradient is gradients[k * n, (k + 1) * n) for the n weights;
  // the replies go into `weights` (every shard's carry the same version).
  // Returns the first failure, or the oldest version.
  absl::StatusOr<int64_t> Run(const PushTarget& base, int64_t step,
                              absl::Span<const PushSlot> slots,
                              absl::Span<const float> gradients,
                              absl::Span<float> weights, absl::Time deadline);

 private:
  std::vector<PushTarget> targets_;                // By shard pushed.
  std::vector<std::vector<std::string>> encoded_;  // By shard, then chunk.
  std::vector<std::vector<float>> replies_;        // Shards after the first.
};

}  // namespace ps_client_internal
}  // namespace lockstep

#endif  // LOCKSTEP_WORKER_EXCHANGE_PS_PUSH_STEP_H_
