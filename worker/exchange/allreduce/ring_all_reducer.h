// The "grpc-ring" backend of AllReducer: a chunked, pipelined ring
// reduce-scatter + all-gather over Lockstep's own gRPC transport, so that a
// comparison with parameter-server mode isolates the algorithm from the
// transport.
//
// Each rank hosts a Ring service (ring_service.h) on options.host and
// receives chunks from its left neighbour; it sends to its right one. At
// creation every rank publishes its address and a random session id under
// "<group>/grpc-ring/peer/<rank>" in the Coordinator and reads everyone's, so
// creation fails with DEADLINE_EXCEEDED on every rank when one never comes.
//
// AllReduceSum follows RingPlan (ring_plan.h). Every chunk travels its own
// pipeline: the handler that receives chunk c of step t adds (or copies) it
// into the caller's vector, in place, straight from gRPC's request, and
// queues chunk c of step t + 1 for the right neighbour; up to max_in_flight
// sends are outstanding at once. So sending, receiving and summing overlap,
// and no gRPC thread ever waits. A chunk of an all-reduce this rank has not
// started yet is held, unanswered, until it starts; since the sender counts
// it as in flight, memory stays bounded. Each segment is summed along one
// path and then copied around the ring, so every rank ends with
// bit-identical values.
//
// Externally synchronized, like every AllReducer; internally, gRPC's threads
// and the caller's share the state under one mutex.
#ifndef LOCKSTEP_WORKER_EXCHANGE_ALLREDUCE_RING_ALL_REDUCER_H_
#define LOCKSTEP_WORKER_EXCHANGE_ALLREDUCE_RING_ALL_REDUCER_H_

#include <cstddef>
#include <cstdint>
#include <memory>
#include <string>
#include <vector>

#include "absl/base/thread_annotations.h"
#include "absl/status/status.h"
#include "absl/status/statusor.h"
#include "absl/strings/str_cat.h"
#include "absl/synchronization/mutex.h"
#include "absl/types/span.h"
#include "common/security/authorizer.h"
#include "worker/exchange/allreduce/all_reducer.h"
#include "worker/exchange/allreduce/ring_service.h"

namespace grpc {
class Server;
}  // namespace grpc

namespace lockstep {

class RingAllReducer final : public AllReducer, private RingChunkSink {
 public:
  // Starts the ring service and meets the other ranks; `options` are
  // validated by CreateAllReducer.
  static absl::StatusOr<std::unique_ptr<AllReducer>> Create(
      const AllReduceOptions& options);
  // Refuses further chunks (ABORTED) and stops the service.
  ~RingAllReducer() override;

  absl::Status AllReduceSum(absl::Span<float> data) override;
  std::string Name() const override { return "grpc-ring"; }

 private:
  struct Call;
  struct Op;
  struct Held {
    RingChunkView chunk;
    Done done;
  };

  // `authorizer` guards the ring service; null: every caller is let in.
  RingAllReducer(const AllReduceOptions& options,
                 std::unique_ptr<Authorizer> authorizer);

  // Starts the service, publishes this rank and reads the others
  // (ring_all_reducer_setup.cc).
  absl::Status Start();
  // Starts the ring service on options_.host; returns its port.
  absl::StatusOr<int> Listen();
  // Publishes this rank's address and session, reads every other rank's,
  // keeps the left neighbour's session and returns the right's address.
  absl::StatusOr<std::string> Rendezvous(int port);

  // AllReduceSum's parts. BeginOp makes the op over `data` the running one
  // (null when there is nothing to exchange), with the sends to start and
  // the chunks that came early; FinishOp waits for it to end or fail,
  // cancels what is left of a failed one, and returns its status.
  absl::StatusOr<std::unique_ptr<Op>> BeginOp(absl::Span<float> data,
                                              size_t chunk_elements,
                                              std::vector<Call*>* to_start,
                                              std::vector<Held>* earlier)
      ABSL_LOCKS_EXCLUDED(mu_);
  absl::Status FinishOp(std::unique_ptr<Op> op) ABSL_LOCKS_EXCLUDED(mu_);

  // RingChunkSink: applies a chunk of the running all-reduce, holds one of a
  // later all-reduce, refuses the rest.
  void OnChunk(const RingChunkView& chunk, Done done) override;

  // Checks a chunk of the running op and marks it received. On success the
  // caller is busy in the op (see Op::busy).
  absl::Status AcceptLocked(Op& op, const RingChunkView& chunk)
      ABSL_EXCLUSIVE_LOCKS_REQUIRED(mu_);
  // Takes ready sends off the queue while the window has room. The caller
  // starts the returned calls with StartCalls, outside the lock.
  std::vector<Call*> PumpLocked(Op& op) ABSL_EXCLUSIVE_LOCKS_REQUIRED(mu_);
  void StartCalls(Op& op, const std::vector<Call*>& calls)
      ABSL_LOCKS_EXCLUDED(mu_);
  void OnSendDone(Op& op, Call& call, absl::Status status)
      ABSL_LOCKS_EXCLUDED(mu_);
  void FailLocked(Op& op, absl::Status status)
      ABSL_EXCLUSIVE_LOCKS_REQUIRED(mu_);
  // The answer to a chunk that reaches a ring being destroyed: its rank is
  // going away (UNAVAILABLE, as when it is gone).
  absl::Status ClosingError() const {
    return absl::UnavailableError(
        absl::StrCat("rank ", options_.rank, " is closing its ring"));
  }
  // Conditions on the running op (op_ is set): every chunk applied and
  // acknowledged, or an error; nothing of it running outside the lock.
  bool OpFinishedOrFailed() const ABSL_EXCLUSIVE_LOCKS_REQUIRED(mu_);
  bool OpQuiet() const ABSL_EXCLUSIVE_LOCKS_REQUIRED(mu_);

  const AllReduceOptions options_;
  // The largest chunk a call may use (its message-size limit).
  const int64_t max_chunk_bytes_;
  const int left_rank_;
  const int right_rank_;
  const uint64_t session_;

  absl::Mutex mu_;
  uint64_t left_session_ ABSL_GUARDED_BY(mu_) = 0;  // 0 until rendezvous.
  int64_t next_op_ ABSL_GUARDED_BY(mu_) = 0;
  Op* op_ ABSL_GUARDED_BY(mu_) = nullptr;        // The running op, if any.
  std::vector<Held> held_ ABSL_GUARDED_BY(mu_);  // Chunks of later ops.
  absl::Status broken_ ABSL_GUARDED_BY(mu_);     // The first failure.
  bool closing_ ABSL_GUARDED_BY(mu_) = false;

  // Declared after the state its handlers use, so destroyed before it.
  const std::unique_ptr<Authorizer> authorizer_;
  RingService service_{this, authorizer_.get()};
  std::unique_ptr<grpc::Server> server_;
  // To the right neighbour; set by Start, before any op, then only read.
  std::unique_ptr<v1::Ring::Stub> right_stub_;
};

}  // namespace lockstep

#endif  // LOCKSTEP_WORKER_EXCHANGE_ALLREDUCE_RING_ALL_REDUCER_H_
