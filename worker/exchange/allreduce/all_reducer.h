// Sums a vector across the workers of a job, with no server in the data
// path: the communication behind --sync=allreduce.
//
// AllReducer is the interface; CreateAllReducer makes one of three backends:
//   "gloo"      CPU, over TCP, with Gloo's ring all-reduce (Debian's
//               libgloo, the library PyTorch uses).
//   "grpc-ring" CPU, a chunked, pipelined ring reduce-scatter + all-gather
//               over Lockstep's own gRPC transport (ring_all_reducer.h).
//   "nccl"      GPU, ncclAllReduce; only in builds with NCCL, and only where
//               a GPU is visible.
// Ranks meet through the Coordinator service (coordination.proto) that the
// parameter server or the launcher hosts: each publishes what its peers need
// under "<group>/<backend>/..." and reads theirs, so creation is collective
// (every rank calls CreateAllReducer with the same size, group and backend)
// and returns once every rank has arrived.
//
//   AllReduceOptions options;
//   options.backend = "grpc-ring";
//   options.rank = rank;
//   options.size = num_workers;
//   options.coordinator = "10.0.0.1:50051";
//   ASSIGN_OR_RETURN(std::unique_ptr<AllReducer> reducer,
//                    CreateAllReducer(options));
//   RETURN_IF_ERROR(reducer->AllReduceSum(absl::MakeSpan(gradients)));
//   // Divide by options.size for the mean.
#ifndef LOCKSTEP_WORKER_EXCHANGE_ALLREDUCE_ALL_REDUCER_H_
#define LOCKSTEP_WORKER_EXCHANGE_ALLREDUCE_ALL_REDUCER_H_

#include <cstdint>
#include <memory>
#include <string>

#include "absl/status/status.h"
#include "absl/status/statusor.h"
#include "absl/time/time.h"
#include "absl/types/span.h"
#include "common/model/chunk_plan.h"
#include "common/security/tls_options.h"

namespace lockstep {

// How to build an AllReducer; parsed once from flags in the worker's main.
struct AllReduceOptions {
  // "gloo", "grpc-ring" or "nccl".
  std::string backend = "gloo";
  // This worker's rank, 0 <= rank < size.
  int rank = 0;
  // Number of workers taking part. With 1 there is nothing to exchange: no
  // coordinator is needed and AllReduceSum leaves the data as it is.
  int size = 1;
  // host:port of the Coordinator service (required when size > 1).
  std::string coordinator;
  // This host's address as peers reach it: gloo's TCP pairs and the ring
  // service listen on it and it is what is published. Give a routable
  // address of this host (not 0.0.0.0); IPv6 literals without brackets.
  std::string host = "127.0.0.1";
  // Prefix of every coordinator key. A job that reuses a coordinator for a
  // new run, or runs two reducers at once, gives each its own group.
  std::string group = "allreduce";
  // How long creation waits for every rank to arrive (DEADLINE_EXCEEDED
  // after it). lockstep_worker sets it from --connect_timeout_s.
  absl::Duration rendezvous_timeout = absl::Seconds(60);
  // How long one AllReduceSum may take, waiting for the slowest rank
  // included (DEADLINE_EXCEEDED after it). lockstep_worker sets it from
  // --step_timeout_s.
  absl::Duration op_timeout = absl::Seconds(60);
  // Largest piece of the vector sent at once, in bytes (at least 4): the
  // ring's chunk, gloo's segment. Smaller pieces pipeline better, larger ones
  // cost fewer messages. kAutoChunkBytes: grpc-ring takes AutoChunkBytes of
  // each call's vector over its ranks (about 32 chunks per ring segment,
  // common/model/chunk_plan.h), gloo 4 MiB.
  int64_t chunk_bytes = kAutoChunkBytes;
  // grpc-ring: chunks each rank may have in flight to its neighbour, 1..64.
  int max_in_flight = 4;
  // nccl: the CUDA device ordinal this rank uses.
  int gpu = 0;
  // Security of the coordinator channel and the grpc-ring's service and
  // channel (common/security/tls.h); the default is plaintext. gloo's and NCCL's
  // own transports have no TLS: with a non-loopback `host` they are
  // refused unless tls.insecure.
  TlsOptions tls;
};

// A communicator among `size` ranks. Collective calls must be made by every
// rank, in the same order, on vectors of the same length. Externally
// synchronized: one thread calls it at a time.
class AllReducer {
 public:
  virtual ~AllReducer() = default;

  // Replaces `data` with the element-wise sum of every rank's `data`, in
  // place. Every rank ends with bit-identical values: each element is summed
  // in one order, at one place, and the result copied to the others, so
  // replicas that apply the same update stay bit-identical. The sum is fp32
  // (rounded at each addition; order depends on the backend).
  // Errors: DEADLINE_EXCEEDED when a rank did not take part within
  // op_timeout; UNAVAILABLE or ABORTED when a peer went away or failed;
  // INVALID_ARGUMENT when the ranks' lengths differ (where detected). After
  // an error the ranks are out of step: every later call fails with
  // FAILED_PRECONDITION, and the job makes a new reducer (in a new group).
  virtual absl::Status AllReduceSum(absl::Span<float> data) = 0;

  // The backend: "gloo", "grpc-ring" or "nccl".
  virtual std::string Name() const = 0;
};

// Validates `options` (INVALID_ARGUMENT), then makes the backend and meets
// the other ranks: returns once all `size` ranks have arrived, or
// DEADLINE_EXCEEDED after rendezvous_timeout. FAILED_PRECONDITION for "nccl"
// in a build without NCCL or on a machine with no visible GPU. This is the
// only place that knows which backends were compiled in.
absl::StatusOr<std::unique_ptr<AllReducer>> CreateAllReducer(
    const AllReduceOptions& options);

}  // namespace lockstep

#endif  // LOCKSTEP_WORKER_EXCHANGE_ALLREDUCE_ALL_REDUCER_H_
