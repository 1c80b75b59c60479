// The "nccl" backend of AllReducer: ncclAllReduce among one GPU per rank.
//
// Rank 0 makes NCCL's unique id and publishes it in the Coordinator under
// "<group>/nccl/unique_id"; the others read it and all join one
// communicator. The communicator is non-blocking, so that creation and every
// all-reduce can give up at their deadlines (DEADLINE_EXCEEDED, after which
// the communicator is aborted) instead of hanging on a missing rank.
// AllReduceSum takes host memory and stages it through a device buffer;
// AllReduceSumOnDevice works on a device pointer directly (the path a CUDA
// training loop uses). NCCL reduces each element once and broadcasts it, so
// every rank ends with identical values.
//
// This header is plain host C++ (no CUDA or NCCL headers), so the factory
// can create the reducer; only worker/exchange/allreduce/all_reducer_factory.cc
// does. Externally synchronized, like every AllReducer.
#ifndef LOCKSTEP_WORKER_EXCHANGE_ALLREDUCE_NCCL_NCCL_ALL_REDUCER_H_
#define LOCKSTEP_WORKER_EXCHANGE_ALLREDUCE_NCCL_NCCL_ALL_REDUCER_H_

#include <cstddef>
#include <memory>
#include <string>

#include "absl/status/status.h"
#include "absl/status/statusor.h"
#include "absl/types/span.h"
#include "worker/exchange/allreduce/all_reducer.h"

namespace lockstep {

class NcclAllReducer final : public AllReducer {
 public:
  // FAILED_PRECONDITION when no GPU is visible (with the runtime's reason),
  // INVALID_ARGUMENT when options.gpu is not a visible device,
  // DEADLINE_EXCEEDED when the ranks do not all arrive within
  // rendezvous_timeout. `options` are validated by CreateAllReducer.
  static absl::StatusOr<std::unique_ptr<NcclAllReducer>> Create(
      const AllReduceOptions& options);
  ~NcclAllReducer() override;

  // Host memory: copied to the GPU, reduced there, copied back.
  absl::Status AllReduceSum(absl::Span<float> data) override;
  // `count` floats at `device_data` on this reducer's GPU, in place;
  // returns when the result is there.
  absl::Status AllReduceSumOnDevice(float* device_data, size_t count);
  std::string Name() const override { return "nccl"; }

 private:
  struct Impl;
  explicit NcclAllReducer(std::unique_ptr<Impl> impl);

  const std::unique_ptr<Impl> impl_;
};

// CreateAllReducer's entry point for "nccl".
absl::StatusOr<std::unique_ptr<AllReducer>> CreateNcclAllReducer(
    const AllReduceOptions& options);

}  // namespace lockstep

#endif  // LOCKSTEP_WORKER_EXCHANGE_ALLREDUCE_NCCL_NCCL_ALL_REDUCER_H_
