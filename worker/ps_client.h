// A worker's connection to the parameter-server shards.
//
// PsClient speaks the lockstep.v1 protocol (see server/parameter_server.h for
// the sequence) and hides chunking and sharding: callers hand it whole flat
// vectors, and it sends one RPC per chunk to the shard that owns it (see
// common/chunk_plan.h), all chunks in flight at once. Every RPC has a
// deadline. Protobuf and gRPC types stay inside. Externally synchronized (one
// training thread uses it).
#ifndef LOCKSTEP_WORKER_PS_CLIENT_H_
#define LOCKSTEP_WORKER_PS_CLIENT_H_

#include <cstdint>
#include <memory>
#include <string>
#include <vector>

#include "absl/status/statusor.h"
#include "absl/time/time.h"
#include "absl/types/span.h"
#include "common/chunk_plan.h"
#include "common/model_signature.h"
#include "common/wire_codec.h"

namespace lockstep {

struct PsClientOptions {
  // host:port of every parameter-server shard, in shard order.
  std::vector<std::string> servers;
  // How long Register waits for the server to come up.
  absl::Duration connect_timeout = absl::Seconds(60);
  // Deadline of Initialize, Pull, Leave and GetStatus calls.
  absl::Duration rpc_timeout = absl::Seconds(60);
  // Deadline of a push, which includes waiting for the slowest worker.
  absl::Duration step_timeout = absl::Seconds(300);
  int max_message_bytes = 64 << 20;
  // Encoding of gradients and weights on the wire (servers keep fp32).
  WireDType wire_dtype = WireDType::kFloat32;
};

struct RegisterResult {
  int64_t incarnation = 0;
  bool must_initialize = false;
  int64_t version = -1;
};

class PsClient final {
 public:
  static absl::StatusOr<std::unique_ptr<PsClient>> Create(
      const PsClientOptions& options);
  ~PsClient();

  // Joins the job as `rank`; waits up to connect_timeout for the server.
  absl::StatusOr<RegisterResult> Register(int rank,
                                          const ModelSignature& signature);

  // Uploads version 0 (rank 0, after must_initialize).
  absl::Status Initialize(absl::Span<const float> weights);

  // Reads the latest weights once their version is >= min_version; returns
  // the version read.
  absl::StatusOr<int64_t> Pull(int64_t min_version, absl::Span<float> weights);

  // Pushes the gradient of `step` and receives the weights of version
  // step + 1 into `weights`: BeginStep + GradientReady(all) + FinishStep.
  absl::Status PushPull(int64_t step, absl::Span<const float> gradient,
                        absl::Span<float> weights);

  // The same step in pieces, so pushes overlap backprop: BeginStep names the
  // step and the vectors (which must stay alive and, for `gradient`, keep
  // its ready ranges unchanged until FinishStep); GradientReady(begin, end)
  // says gradient[begin, end) is final and pushes every chunk that became
  // complete; FinishStep pushes the rest and waits for all replies, which
  // are decoded into `weights` as they arrive.
  absl::Status BeginStep(int64_t step, absl::Span<const float> gradient,
                         absl::Span<float> weights);
  void GradientReady(int64_t begin, int64_t end);
  absl::Status FinishStep();

  // Says this worker is done.
  absl::Status Leave();

 private:
  class Impl;
  explicit PsClient(std::unique_ptr<Impl> impl);
  std::unique_ptr<Impl> impl_;
};

}  // namespace lockstep

#endif  // LOCKSTEP_WORKER_PS_CLIENT_H_
