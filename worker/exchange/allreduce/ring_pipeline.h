// The ring passes of one rank of the grpc-ring all-reducer: it runs each
// AllReduceSum as RingPlan's reduce-scatter + all-gather (ring_plan.h),
// sending chunks to the right neighbour through a RingLink and receiving the
// left neighbour's as a RingChunkSink (ring_chunk.h), with no transport of
// its own: RingConnection provides both ends over gRPC, tests in-process.
//
// Every chunk travels its own pipeline: the sink call that receives chunk c
// of step t adds (or copies) it into the caller's vector, in place, straight
// from the message, and queues chunk c of step t + 1 for the right
// neighbour; up to max_in_flight sends are outstanding at once. So sending,
// receiving and summing overlap, and no receiving thread ever waits. A chunk
// of an all-reduce this rank has not started yet is held, unanswered, until
// it starts; since the sender counts it as in flight, memory stays bounded.
// Each segment is summed along one path and then copied around the ring, so
// every rank ends with bit-identical values. An op that fails (its deadline,
// a refused or bad chunk) cancels its sends and breaks the pipeline: every
// later op fails with FAILED_PRECONDITION.
//
// Owns one mutex, under which the sink's threads, the link's completion
// threads and the caller's share the running op (a RingOp), the held chunks
// and the pipeline's state. AllReduceSum is externally synchronized (one
// caller at a time), like every AllReducer; OnChunk and Close are
// thread-safe.
#ifndef LOCKSTEP_WORKER_EXCHANGE_ALLREDUCE_RING_PIPELINE_H_
#define LOCKSTEP_WORKER_EXCHANGE_ALLREDUCE_RING_PIPELINE_H_

#include <cstddef>
#include <cstdint>
#include <memory>
#include <vector>

#include "absl/base/thread_annotations.h"
#include "absl/status/status.h"
#include "absl/status/statusor.h"
#include "absl/synchronization/mutex.h"
#include "absl/types/span.h"
#include "worker/exchange/allreduce/all_reducer.h"
#include "worker/exchange/allreduce/ring_chunk.h"
#include "worker/exchange/allreduce/ring_op.h"

namespace lockstep {

class RingPipeline final : public RingChunkSink {
 public:
  // Rank options.rank of options.size, with options.chunk_bytes,
  // max_in_flight and op_timeout (validated by CreateAllReducer); its chunks
  // carry `session`, which is never 0.
  RingPipeline(const AllReduceOptions& options, uint64_t session);
  // Close()s, if the owner has not.
  ~RingPipeline() override;

  RingPipeline(const RingPipeline&) = delete;
  RingPipeline& operator=(const RingPipeline&) = delete;

  uint64_t session() const { return session_; }

  // Sends go to `right` (not owned; it must outlive every op); chunks are
  // taken from the left neighbour's `left_session`. Called once, before the
  // first AllReduceSum with more than one rank; chunks that came earlier
  // are held until then.
  void Connect(RingLink* right, uint64_t left_session) ABSL_LOCKS_EXCLUDED(mu_);

  // AllReducer::AllReduceSum over the ring.
  absl::Status AllReduceSum(absl::Span<float> data) ABSL_LOCKS_EXCLUDED(mu_);

  // Refuses held and further chunks: this rank is going away (UNAVAILABLE,
  // as when it is gone). Call before the sink's transport stops.
  void Close() ABSL_LOCKS_EXCLUDED(mu_);

  // RingChunkSink: applies a chunk of the running all-reduce, holds one of a
  // later all-reduce, refuses the rest: at once, and with no effect on the
  // op, a chunk that is not from the left neighbour's rank and (once
  // connected) session.
  void OnChunk(const RingChunkView& chunk, Done done) override
      ABSL_LOCKS_EXCLUDED(mu_);

 private:
  struct Call;
  struct Run;
  struct Held {
    RingChunkView chunk;
    Done done;
  };

  // AllReduceSum's parts. BeginOp makes the op over `data` the running one
  // (null when there is nothing to exchange), with the sends to start and
  // the chunks that came early; FinishOp waits for it to end or fail,
  // cancels what is left of a failed one, and returns its status.
  absl::StatusOr<std::unique_ptr<Run>> BeginOp(absl::Span<float> data,
                                               size_t chunk_elements,
                                               std::vector<Call*>* to_start,
                                               std::vector<Held>* earlier)
      ABSL_LOCKS_EXCLUDED(mu_);
  absl::Status FinishOp(std::unique_ptr<Run> run) ABSL_LOCKS_EXCLUDED(mu_);

  // Checks a chunk of the running op and marks it received. On success the
  // caller is busy in the op (see Run::busy).
  absl::Status AcceptLocked(Run& run, const RingChunkView& chunk)
      ABSL_EXCLUSIVE_LOCKS_REQUIRED(mu_);
  // Takes ready sends off the op while the window has room. The caller
  // starts the returned calls with StartCalls, outside the lock.
  std::vector<Call*> PumpLocked(Run& run) ABSL_EXCLUSIVE_LOCKS_REQUIRED(mu_);
  void StartCalls(Run& run, const std::vector<Call*>& calls)
      ABSL_LOCKS_EXCLUDED(mu_);
  void OnSendDone(Run& run, Call& call, absl::Status status)
      ABSL_LOCKS_EXCLUDED(mu_);
  // The answer to a chunk that reaches a closing pipeline.
  absl::Status ClosingError() const;
  // Conditions on the running op (run_ is set): finished or failed; nothing
  // of it running outside the lock.
  bool RunFinishedOrFailed() const ABSL_EXCLUSIVE_LOCKS_REQUIRED(mu_);
  bool RunQuiet() const ABSL_EXCLUSIVE_LOCKS_REQUIRED(mu_);

  const AllReduceOptions options_;
  const int left_rank_;
  const int right_rank_;
  const uint64_t session_;

  // Set by Connect, before any op, then only read.
  RingLink* right_ = nullptr;  // Not owned.

  absl::Mutex mu_;
  uint64_t left_session_ ABSL_GUARDED_BY(mu_) = 0;  // 0 until Connect.
  int64_t next_op_ ABSL_GUARDED_BY(mu_) = 0;
  Run* run_ ABSL_GUARDED_BY(mu_) = nullptr;      // The running op, if any.
  std::vector<Held> held_ ABSL_GUARDED_BY(mu_);  // Chunks of later ops.
  absl::Status broken_ ABSL_GUARDED_BY(mu_);     // The first failure.
  bool closing_ ABSL_GUARDED_BY(mu_) = false;
};

}  // namespace lockstep

#endif  // LOCKSTEP_WORKER_EXCHANGE_ALLREDUCE_RING_PIPELINE_H_
