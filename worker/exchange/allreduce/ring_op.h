// The bookkeeping of one ring all-reduce on one rank (RingPlan's schedule,
// ring_plan.h): which chunks have come from the left neighbour and been
// applied, which are ready to go to the right one, how many sends are out
// (the window) and acknowledged, and the op's first error. It checks each
// received chunk against the plan and applies its payload to the caller's
// vector: added in a reduce-scatter step, copied in an all-gather step.
//
// It starts with the chunks of step 0 ready; a chunk applied at step t makes
// the same chunk ready at step t + 1. Apart from Apply (see there), every
// call is externally synchronized: RingPipeline calls it under its mutex.
// It neither owns the vector nor sends anything.
#ifndef LOCKSTEP_WORKER_EXCHANGE_ALLREDUCE_RING_OP_H_
#define LOCKSTEP_WORKER_EXCHANGE_ALLREDUCE_RING_OP_H_

#include <cstdint>
#include <deque>
#include <vector>

#include "absl/status/status.h"
#include "absl/time/time.h"
#include "absl/types/span.h"
#include "worker/exchange/allreduce/ring_chunk.h"
#include "worker/exchange/allreduce/ring_plan.h"

namespace lockstep {

class RingOp final {
 public:
  // A chunk to send: chunk `chunk` of step `step`'s send segment.
  struct SendId {
    int step = 0;
    int64_t chunk = 0;
  };

  // The all-reduce numbered `id` over `data` (not owned; it must outlive the
  // op), by `plan`, which must be over data.size() elements, until
  // `deadline`.
  RingOp(int64_t id, absl::Span<float> data, RingPlan plan,
         absl::Time deadline);

  int64_t id() const { return id_; }
  const RingPlan& plan() const { return plan_; }
  absl::Time deadline() const { return deadline_; }
  // The first failure; OK while the op is sound.
  const absl::Status& error() const { return error_; }

  // Every chunk received and applied, and every send acknowledged (at once
  // for an empty vector: nothing to exchange).
  bool Finished() const { return receives_left_ == 0 && sends_left_ == 0; }
  bool FinishedOrFailed() const { return !error_.ok() || Finished(); }
  // Records `status` as the op's error unless it has one already.
  void Fail(absl::Status status);

  // Checks `chunk` (from `left_rank`, whose session is `left_session`)
  // against the plan and marks it received; the caller then Applies it
  // and calls Applied. ABORTED if the op failed already; otherwise
  // FAILED_PRECONDITION (wrong sender or session) or INVALID_ARGUMENT (a
  // different vector size, a step or chunk out of range, a duplicate, a
  // wrong payload size), which also fail the op.
  absl::Status Accept(const RingChunkView& chunk, int left_rank,
                      uint64_t left_session);
  // Adds (reduce-scatter step) or copies (all-gather step) the payload of an
  // accepted chunk into its range of the vector. Touches only that range,
  // so it may run outside the lock, concurrently with other chunks' Apply.
  void Apply(const RingChunkView& chunk) const;
  // The accepted `chunk` has been applied: one receive less, and the same
  // chunk of the next step (if any) is ready to send.
  void Applied(const RingChunkHeader& chunk);

  // Takes ready sends, in the order they became ready, while the op is
  // sound and fewer than `max_in_flight` are out; each counts as out until
  // SendDone.
  std::vector<SendId> TakeReady(int max_in_flight);
  // A send taken by TakeReady ended: acknowledged or not.
  void SendDone(bool acknowledged);

  // What to send for `send`: its header (from this rank, in `session`) and
  // its values, a part of the vector.
  RingChunkHeader HeaderOf(SendId send, uint64_t session) const;
  absl::Span<const float> ValuesOf(SendId send) const;

 private:
  const int64_t id_;
  const absl::Span<float> data_;  // The caller's vector; not owned.
  const RingPlan plan_;
  const absl::Time deadline_;

  int64_t receives_left_ = 0;                // Chunks not yet applied.
  int64_t sends_left_ = 0;                   // Chunks not yet acknowledged.
  std::deque<SendId> ready_;                 // To send, in order.
  int window_ = 0;                           // Sends taken and not yet done.
  std::vector<std::vector<bool>> received_;  // By step, by chunk.
  absl::Status error_;
};

}  // namespace lockstep

#endif  // LOCKSTEP_WORKER_EXCHANGE_ALLREDUCE_RING_OP_H_
