// The "grpc-ring" backend of AllReducer: a chunked, pipelined ring
// reduce-scatter + all-gather over Lockstep's own gRPC transport, so that a
// comparison with parameter-server mode isolates the algorithm from the
// transport.
//
// Made of parts by job: RingPipeline (ring_pipeline.h) runs the ring passes
// of each AllReduceSum, one RingOp (ring_op.h) at a time, following RingPlan
// (ring_plan.h); RingConnection (ring_connection.h) hosts the Ring service
// that feeds the pipeline the left neighbour's chunks, meets the other ranks
// through the Coordinator and carries the pipeline's chunks to the right
// neighbour. This class owns both, makes them meet, and orders their end:
// the pipeline refuses chunks before the service stops.
//
// Externally synchronized, like every AllReducer; the parts' own threads
// (gRPC's) share the pipeline's state under its mutex.
#ifndef LOCKSTEP_WORKER_EXCHANGE_ALLREDUCE_RING_ALL_REDUCER_H_
#define LOCKSTEP_WORKER_EXCHANGE_ALLREDUCE_RING_ALL_REDUCER_H_

#include <memory>
#include <string>

#include "absl/status/status.h"
#include "absl/status/statusor.h"
#include "absl/types/span.h"
#include "common/security/authorizer.h"
#include "worker/exchange/allreduce/all_reducer.h"
#include "worker/exchange/allreduce/ring_connection.h"
#include "worker/exchange/allreduce/ring_pipeline.h"

namespace lockstep {

class RingAllReducer final : public AllReducer {
 public:
  // Starts the ring service and meets the other ranks; `options` are
  // validated by CreateAllReducer.
  static absl::StatusOr<std::unique_ptr<AllReducer>> Create(
      const AllReduceOptions& options);
  // Refuses further chunks (UNAVAILABLE) and stops the service.
  ~RingAllReducer() override;

  absl::Status AllReduceSum(absl::Span<float> data) override;
  std::string Name() const override { return "grpc-ring"; }

 private:
  explicit RingAllReducer(const AllReduceOptions& options);

  // Makes the connection (its service guarded by `authorizer`; null: every
  // caller is let in), starts it and connects the pipeline to it.
  absl::Status Connect(std::unique_ptr<Authorizer> authorizer);

  const AllReduceOptions options_;
  const std::unique_ptr<RingPipeline> pipeline_;
  // Declared after the pipeline its service feeds, so destroyed before it;
  // null with one rank.
  std::unique_ptr<RingConnection> connection_;
};

}  // namespace lockstep

#endif  // LOCKSTEP_WORKER_EXCHANGE_ALLREDUCE_RING_ALL_REDUCER_H_
