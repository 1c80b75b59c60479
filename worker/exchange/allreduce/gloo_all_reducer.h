// The "gloo" backend of AllReducer: Gloo's ring all-reduce over its TCP
// transport, on the CPU.
//
// Creation connects a full mesh of TCP pairs among the ranks, meeting through
// the Coordinator (CoordinatorGlooStore under "<group>/gloo/"). AllReduceSum
// runs gloo::allreduce with the ring algorithm: a reduce-scatter in which each
// segment is summed along one path, then an all-gather that copies it, so
// every rank ends with bit-identical sums. Gloo reports errors by throwing;
// this class is the one place they are caught and turned into absl::Status
// (a gloo timeout becomes DEADLINE_EXCEEDED). Gloo's headers stay in the .cc.
// Externally synchronized, like every AllReducer.
#ifndef LOCKSTEP_WORKER_EXCHANGE_ALLREDUCE_GLOO_ALL_REDUCER_H_
#define LOCKSTEP_WORKER_EXCHANGE_ALLREDUCE_GLOO_ALL_REDUCER_H_

#include <memory>
#include <string>

#include "absl/status/status.h"
#include "absl/status/statusor.h"
#include "absl/types/span.h"
#include "worker/exchange/allreduce/all_reducer.h"

namespace gloo {
class Context;
}  // namespace gloo

namespace lockstep {

class GlooAllReducer final : public AllReducer {
 public:
  // Meets the other ranks; `options` are validated by CreateAllReducer.
  static absl::StatusOr<std::unique_ptr<AllReducer>> Create(
      const AllReduceOptions& options);
  ~GlooAllReducer() override;

  absl::Status AllReduceSum(absl::Span<float> data) override;
  std::string Name() const override { return "gloo"; }

 private:
  GlooAllReducer(const AllReduceOptions& options,
                 std::shared_ptr<gloo::Context> context);

  const AllReduceOptions options_;
  // Null when size is 1.
  const std::shared_ptr<gloo::Context> context_;
  // The first error; every later call fails because of it.
  absl::Status broken_;
};

}  // namespace lockstep

#endif  // LOCKSTEP_WORKER_EXCHANGE_ALLREDUCE_GLOO_ALL_REDUCER_H_
