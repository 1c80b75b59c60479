// A worker's connection to the parameter-server shards.
//
// PsClient speaks the lockstep.v1 protocol (see server/core/parameter_server.h
// for the sequence) and hides chunking and sharding: callers hand it whole flat
// vectors, and it sends one call per chunk to the shard that owns it (see
// common/model/chunk_plan.h), up to max_pushes_in_flight pushes at once to each
// shard (the push window). Each shard is reached through a ShardTransport
// (shard_transport.h): gRPC (Create) or any given ones (CreateOver; the
// tests' in-process shards). Every call has a deadline; a step's pushes
// share one, step_timeout after BeginStep. Protobuf and gRPC types stay
// inside. Externally synchronized (one training thread uses it).
#ifndef LOCKSTEP_WORKER_EXCHANGE_PS_PS_CLIENT_H_
#define LOCKSTEP_WORKER_EXCHANGE_PS_PS_CLIENT_H_

#include <cstdint>
#include <memory>
#include <string>
#include <vector>

#include "absl/status/statusor.h"
#include "absl/strings/string_view.h"
#include "absl/time/time.h"
#include "absl/types/span.h"
#include "common/base/env.h"
#include "common/model/chunk_plan.h"
#include "common/model/model_signature.h"
#include "common/security/tls_options.h"
#include "common/wire/wire_codec.h"
#include "worker/exchange/ps/cancel_token.h"
#include "worker/exchange/ps/push_window.h"
#include "worker/exchange/ps/shard_transport.h"

namespace lockstep {

struct PsClientOptions {
  // host:port of every parameter-server shard, in shard order.
  std::vector<std::string> servers;
  // Empty, or each shard's standby (lockstep_server --standby_of), in shard
  // order: calls fail over to it (FailoverShardTransport).
  std::vector<std::string> standby_servers;
  // How long Register waits for the server to come up.
  absl::Duration connect_timeout = absl::Seconds(60);
  // Deadline of Initialize, Pull, Leave and GetStatus calls.
  absl::Duration rpc_timeout = absl::Seconds(60);
  // Deadline of a step's pushes, from BeginStep: the backward pass, the
  // pushes, waiting for the slowest worker and the replies.
  absl::Duration step_timeout = absl::Seconds(300);
  int max_message_bytes = 64 << 20;
  // Encoding of gradients and weights on the wire (servers keep fp32).
  WireDType wire_dtype = WireDType::kFloat32;
  // Pushes out at once to each shard; 0 = every chunk as soon as it is
  // ready; kAutoPushWindow = AutoPushWindow's choice, made at Register.
  // A push waits at the server until every worker has pushed that chunk,
  // so the window bounds what the server holds (workers x window chunks)
  // and lets early chunks' replies travel while later chunks are sent.
  int max_pushes_in_flight = kAutoPushWindow;
  // Encode gradient chunks and start their pushes on a thread of the
  // client's own (worker/exchange/ps/push_thread.h), in the order they became
  // ready, rather than on the thread that calls GradientReady: that thread then
  // never waits for them. Pays where it queues a GPU's kernels; on the CPU
  // device the pushes only take cores from backprop's threads.
  bool push_thread = false;
  // TLS, client certificate and bearer token (common/security/tls.h); the
  // default is plaintext. Binaries fill it from their flags
  // (common/security/tls_flags.h).
  TlsOptions tls;
  // The clock of deadlines and step timings. Not owned.
  Env* env = Env::Default();
  // Cancels the waiting calls of the gRPC shards (Create) when cancelled,
  // and shortens the deadline of Leave then (cancel_token.h). Not owned;
  // null: calls wait for their deadlines.
  CancelToken* cancel = nullptr;
};

// Where a worker's steps spent their time on the client side, summed over
// every step since the client was made. Only grows, so a caller measures a
// window as the difference of two readings. For benchmarks.
struct StepTimings {
  int64_t steps = 0;  // Steps that FinishStep completed.
  // Encoding gradient chunks and framing the requests (caller's thread, or
  // the push thread).
  double encode_seconds = 0;
  // Starting the push RPCs on the caller's thread or the push thread
  // (pushes the window held back start on the transport's threads, inside the
  // wait, and are not counted).
  double send_seconds = 0;
  // FinishStep blocked until the last reply arrived: the server's barrier,
  // summing and optimizer, the transfers, and the decoding of replies that
  // arrived meanwhile.
  double wait_seconds = 0;
  // Decoding reply weights, summed over the threads that complete pushes
  // (overlaps the wait).
  double decode_seconds = 0;
};

struct RegisterResult {
  int64_t incarnation = 0;
  // Over the shards that own a chunk (a plan of N values over S shards
  // may leave some shards none when N <= S (S - 1), and those are never
  // initialized and never hold a version): whether version 0 is still to
  // be defined, and the lowest and highest version.
  bool must_initialize = false;
  int64_t version = -1;
  int64_t newest_version = -1;
  // By shard: its version, the versions of its checkpoints, and whether it
  // owns a chunk.
  std::vector<int64_t> shard_versions;
  std::vector<std::vector<int64_t>> shard_checkpoints;
  std::vector<bool> shard_owns_chunks;
};

class PsClient final {
 public:
  // INVALID_ARGUMENT without servers or with bad TLS settings or files;
  // FAILED_PRECONDITION for a token that would travel in plaintext.
  static absl::StatusOr<std::unique_ptr<PsClient>> Create(
      const PsClientOptions& options);
  // A client over `shards`, one transport per shard in shard order
  // (options.servers and the channel settings are not used).
  // INVALID_ARGUMENT without shards.
  static absl::StatusOr<std::unique_ptr<PsClient>> CreateOver(
      const PsClientOptions& options,
      std::vector<std::unique_ptr<ShardTransport>> shards);
  ~PsClient();

  // Joins the job as `rank`; waits up to connect_timeout for the server.
  // `timeout` (default: connect_timeout) bounds the wait.
  absl::StatusOr<RegisterResult> Register(
      int rank, const ModelSignature& signature,
      absl::Duration timeout = absl::InfiniteDuration());

  // Uploads version 0 (rank 0, after must_initialize).
  absl::Status Initialize(absl::Span<const float> weights);

  // Reads the latest weights once their version is >= min_version; returns
  // the version read (the lowest over chunks). With `exact` (sync mode),
  // chunks that have already closed the step after min_version answer with
  // the weights of min_version while they keep them (ChunkBarrier::Pull).
  absl::StatusOr<int64_t> Pull(int64_t min_version, absl::Span<float> weights,
                               bool exact = false);

  // Pushes the gradient of `step` and receives the resulting weights into
  // `weights`: BeginStep + GradientReady(all) + FinishStep. Returns their
  // version: step + 1 in plain synchronous training; possibly later with
  // backup workers or the asynchronous modes (the oldest chunk's).
  absl::StatusOr<int64_t> PushPull(int64_t step,
                                   absl::Span<const float> gradient,
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
  // Ends the step without pushing the chunks not yet ready (their gradient
  // is not this step's: the computation failed), waiting for the replies
  // of those already sent. The server's step timeout deals with the rest.
  void AbandonStep();
  absl::StatusOr<int64_t> FinishStep();

  // An elastic job's (ParameterServer::Push): the group generation and
  // the batch shard later steps push; generation 0: none, the rank's shard.
  void SetPushSlot(const PushSlot& slot);
  // The report the next pushes carry (PushSlot::report); the slot's group
  // fields stay.
  void SetStepReport(const StepReport& report);
  // One step of several batch shards, slots[k]'s gradient being
  // gradients[k * n, (k + 1) * n) for the n weights: every shard's pushes
  // go out at once, and the replies land in `weights`. Returns the first
  // failure or the oldest version.
  absl::StatusOr<int64_t> PushShards(int64_t step,
                                     absl::Span<const PushSlot> slots,
                                     absl::Span<const float> gradients,
                                     absl::Span<float> weights);

  // The element-wise mean of `values` over the job's workers (a script's
  // metrics), once every worker has made its call of the same count, name
  // and length (server/core/metric_rounds.h); waits up to `timeout`.
  absl::StatusOr<std::vector<double>> Average(const std::string& name,
                                              absl::Span<const double> values,
                                              absl::Duration timeout);

  // Asks shard `shard`, which Register saw at version `from`, to go back
  // to its checkpoint of version `to` (a synchronous job's shards went
  // apart). Every rank must register again afterwards.
  absl::Status StepBack(int shard, int64_t from, int64_t to);

  // Says this worker is done, and why (common/base/leave_note.h).
  absl::Status Leave(const LeaveNote& note = {});
  // Says rank `rank`, which never registered (an all-reduce worker, for
  // which the servers only host the rendezvous), is done. May be called
  // from any thread.
  absl::Status LeaveUnregistered(int rank, const LeaveNote& note = {});
  // Leave, callable from any thread while the training thread is inside
  // another call (a stopping worker's last word); OK and no call when not
  // registered.
  absl::Status LeaveFromAnyThread();

  // Client-side time of the steps so far. Call between steps.
  StepTimings step_timings() const;

  // The push window in use (0: none), once registered.
  int push_window() const;

 private:
  class Impl;
  explicit PsClient(std::unique_ptr<Impl> impl);
  std::unique_ptr<Impl> impl_;
};

}  // namespace lockstep

#endif  // LOCKSTEP_WORKER_EXCHANGE_PS_PS_CLIENT_H_
