// One parameter-server shard, free of any transport.
//
// ParameterServer owns the job's master weights (fp32), the optimizer and its
// state, and one synchronous barrier per chunk of the flat parameter vector.
// Workers push a gradient chunk for step v; the chunk's accumulator sums it
// at once (memory O(model), whatever the number of workers) and records the
// rank. When every worker has pushed that chunk for step v, the server
// divides by the worker count, applies the optimizer to the chunk, publishes
// the chunk's weights of version v + 1 as an immutable snapshot and answers
// every waiting push with it. Nothing ever blocks on the barrier: a push that
// must wait leaves a callback, which the last pusher's thread runs.
//
// Protocol (see proto/lockstep/v1/lockstep.proto):
//   1. Every worker calls Register(rank, signature). Rank 0's signature is
//      the job's; later registrations must match it exactly. One that came
//      before rank 0 with another signature is refused when rank 0 arrives
//      (its waiting pulls fail with FAILED_PRECONDITION naming the
//      difference).
//   2. Rank 0 is told must_initialize and uploads version 0 with Initialize,
//      chunk by chunk. The others Pull(chunk, 0), which waits until then.
//   3. Step v: Push(rank, incarnation, v, chunk, gradient) for every chunk,
//      answered with that chunk's weights of version v + 1.
//   4. Leave(rank) when done; once every rank has left, WaitUntilDone returns.
//
// Thread-safe. Callbacks run on the thread that completes them (the pusher
// that closes a barrier, or the caller) and never under an internal lock.
#ifndef LOCKSTEP_SERVER_PARAMETER_SERVER_H_
#define LOCKSTEP_SERVER_PARAMETER_SERVER_H_

#include <cstdint>
#include <functional>
#include <memory>
#include <optional>
#include <string>
#include <vector>

#include "absl/base/thread_annotations.h"
#include "absl/container/flat_hash_map.h"
#include "absl/status/statusor.h"
#include "absl/strings/string_view.h"
#include "absl/synchronization/mutex.h"
#include "absl/time/time.h"
#include "common/chunk_plan.h"
#include "common/model_signature.h"
#include "server/optimizer.h"

namespace lockstep {

struct ParameterServerOptions {
  int num_workers = 1;  // Workers in every synchronous step.
};

// The weights of one chunk at one version. Immutable once published.
struct ChunkSnapshot {
  int chunk = 0;
  int64_t version = 0;
  std::shared_ptr<const std::vector<float>> values;
};

struct Registration {
  int64_t incarnation = 0;
  bool must_initialize = false;
  int64_t version = -1;
  int64_t server_incarnation = 0;
};

struct ServerStatus {
  int64_t version = -1;  // -1 until version 0 is complete.
  int num_workers = 0;
  int num_chunks = 0;
  int64_t server_incarnation = 0;
  std::vector<int> registered_ranks;
  std::vector<int> pushed_ranks;  // Pushed every chunk of step `version`.
  std::vector<int> finished_ranks;
  std::optional<ModelSignature> signature;
};

class ParameterServer final {
 public:
  using ChunkCallback = std::function<void(absl::StatusOr<ChunkSnapshot>)>;

  // INVALID_ARGUMENT when num_workers < 1.
  static absl::StatusOr<std::unique_ptr<ParameterServer>> Create(
      const ParameterServerOptions& options);
  ~ParameterServer();

  ParameterServer(const ParameterServer&) = delete;
  ParameterServer& operator=(const ParameterServer&) = delete;

  absl::StatusOr<Registration> Register(int rank,
                                        const ModelSignature& signature);

  // Stores chunk `chunk` of version 0 (fp32 bytes). Returns the published
  // version: 0 once every chunk has arrived, else -1.
  absl::StatusOr<int64_t> Initialize(int rank, int64_t incarnation, int chunk,
                                     absl::string_view fp32_bytes);

  // Adds a gradient chunk for `step`. `done` receives the chunk's weights of
  // version step + 1 once every worker has pushed, or an error at once:
  // INVALID_ARGUMENT (bad chunk index, size, NaN/Inf), FAILED_PRECONDITION
  // (unknown rank or stale incarnation, wrong step, not initialized),
  // UNAVAILABLE (shutting down). A push the barrier already counted is not
  // counted again; it gets the same answer.
  void Push(int rank, int64_t incarnation, int64_t step, int chunk,
            absl::string_view fp32_bytes, ChunkCallback done);

  // `done` receives the chunk's latest weights once their version is at
  // least `min_version`. A worker passes its rank and incarnation (checked
  // like a push's); incarnation 0 reads anonymously.
  void Pull(int rank, int64_t incarnation, int chunk, int64_t min_version,
            ChunkCallback done);

  absl::Status Leave(int rank, int64_t incarnation);

  ServerStatus GetStatus() const;

  // True once every rank has left; false when `timeout` passes first.
  bool WaitUntilDone(absl::Duration timeout) const;

  // Answers every waiting push and pull with UNAVAILABLE and refuses new
  // ones, so that a transport can shut down without pending calls.
  void Shutdown();

 private:
  struct ChunkState;

  explicit ParameterServer(const ParameterServerOptions& options);

  // Sets up the plan, optimizer, weights and chunk barriers for `signature`.
  absl::Status ConfigureLocked(const ModelSignature& signature)
      ABSL_EXCLUSIVE_LOCKS_REQUIRED(mu_);
  absl::StatusOr<Registration> RegisterInternal(
      int rank, const ModelSignature& signature,
      std::vector<ChunkCallback>* revoked, std::string* reason)
      ABSL_LOCKS_EXCLUDED(mu_);
  // Forgets the registrations of ranks other than 0 (made under a signature
  // rank 0 overrules) and returns their waiting pulls, to be failed.
  std::vector<ChunkCallback> RevokeProvisionalLocked(const std::string& reason)
      ABSL_EXCLUSIVE_LOCKS_REQUIRED(mu_);
  absl::Status CheckMemberLocked(int rank, int64_t incarnation) const
      ABSL_EXCLUSIVE_LOCKS_REQUIRED(mu_);
  // Validates rank/incarnation/chunk; returns the chunk's state.
  absl::StatusOr<ChunkState*> FindChunk(int rank, int64_t incarnation,
                                        int chunk) const;
  // Records that one chunk reached `version`; publishes the shard version
  // when all have.
  void ChunkPublished(int64_t version);

  const ParameterServerOptions options_;
  const int64_t server_incarnation_;

  mutable absl::Mutex mu_;
  std::optional<ModelSignature> signature_ ABSL_GUARDED_BY(mu_);
  // Until rank 0 registers, the signature is provisional and rank 0's wins.
  bool signature_from_rank0_ ABSL_GUARDED_BY(mu_) = false;
  // Why a revoked incarnation was refused, to tell it when it calls again.
  absl::flat_hash_map<int64_t, std::string> revoked_ ABSL_GUARDED_BY(mu_);
  std::optional<ChunkPlan> plan_ ABSL_GUARDED_BY(mu_);
  std::vector<int64_t> incarnations_ ABSL_GUARDED_BY(mu_);  // 0: none.
  std::vector<bool> finished_ ABSL_GUARDED_BY(mu_);
  int64_t next_incarnation_ ABSL_GUARDED_BY(mu_) = 1;
  int64_t version_ ABSL_GUARDED_BY(mu_) = -1;
  int chunks_at_next_version_ ABSL_GUARDED_BY(mu_) = 0;
  bool shutting_down_ ABSL_GUARDED_BY(mu_) = false;
  // Written once under mu_ by ConfigureLocked, then only read: the chunk
  // states guard their own contents.
  std::vector<std::unique_ptr<ChunkState>> chunks_ ABSL_GUARDED_BY(mu_);
  std::vector<std::unique_ptr<ChunkState>> retired_chunks_ ABSL_GUARDED_BY(mu_);
  std::unique_ptr<Optimizer> optimizer_;  // Set once with chunks_.
  std::vector<float> weights_;  // Master weights; ranges owned by chunks.
};

}  // namespace lockstep

#endif  // LOCKSTEP_SERVER_PARAMETER_SERVER_H_
