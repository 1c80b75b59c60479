// One parameter-server shard, free of any transport.
//
// ParameterServer owns the master weights (fp32), optimizer state and one
// synchronous barrier for each chunk of the flat parameter vector that
// ChunkPlan assigns to this shard; other shards own the other chunks.
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
#ifndef LOCKSTEP_SERVER_CORE_PARAMETER_SERVER_H_
#define LOCKSTEP_SERVER_CORE_PARAMETER_SERVER_H_

#include <atomic>
#include <cstdint>
#include <functional>
#include <limits>
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
#include "common/env.h"
#include "common/group_membership.h"
#include "common/model_signature.h"
#include "common/optimizer.h"
#include "common/wire_codec.h"
#include "common/work_pool.h"
#include "server/core/barrier_observer.h"
#include "server/core/chunk_barrier.h"
#include "server/core/push_checks.h"

namespace lockstep {

struct ParameterServerOptions {
  int num_workers = 1;  // Workers in every synchronous step.
  int shard = 0;        // This server's index among num_shards.
  int num_shards = 1;   // Chunks are spread over shards by ChunkPlan.
  BarrierObserver* observer = nullptr;  // Not owned; may be null.
  SumOrder sum_order = SumOrder::kArrival;  // Synchronous steps' sums.
  // Splits each chunk's sums and optimizer step (--server_threads); not
  // owned, outlives the server; null: each on the calling thread.
  WorkPool* pool = nullptr;
  // Most bytes the model's state on this shard may take (its weights, the
  // sum, a copy for exact pulls and the optimizer's slots); a signature
  // needing more is refused with RESOURCE_EXHAUSTED before anything is
  // allocated. 0: no bound.
  int64_t max_state_bytes = 0;
  // The clock of arrivals, contacts and step timeouts, and the sleeps of
  // Snapshot's wait (the server's incarnation reads the real clock); not
  // owned.
  Env* env = Env::Default();
};

// What a shard holding `elements` of a model trained with `optimizer`
// allocates: weights, the sum, the exact pulls' copy and the optimizer's
// slots (momentum: 1, Adam and AdamW: 2), fp32 each.
int64_t ShardStateBytes(int64_t elements, const OptimizerConfig& optimizer);

struct Registration {
  int64_t incarnation = 0;
  bool must_initialize = false;
  int64_t version = -1;
  int64_t server_incarnation = 0;
};

// Cumulative counters since the shard started (see ServerCounters in the
// proto).
struct ServerCounters {
  int64_t pushes_accepted = 0;
  int64_t pushes_refused = 0;
  int64_t pushes_dropped_late = 0;  // Beaten by backup workers.
  int64_t chunk_steps = 0;
  double accumulate_seconds = 0;
  double apply_seconds = 0;
  double barrier_wait_seconds = 0;
  int64_t bytes_received = 0;
  int64_t bytes_sent = 0;
  // pushes_refused by code; codes with none are left out.
  std::vector<std::pair<absl::StatusCode, int64_t>> pushes_refused_by_code;
};

// What the shard last saw of one rank (see WorkerActivity in the proto).
struct WorkerActivity {
  int rank = 0;
  absl::Time last_contact = absl::InfinitePast();  // Any RPC; past: never.
  int64_t last_step = -1;  // Latest step pushed; -1: none.
  // Between the first pushes of its two latest steps (when consecutive);
  // zero until then.
  absl::Duration last_step_time;
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
  ServerCounters counters;
  int shard = 0;
  int num_shards = 1;
  absl::Time now;                       // When this status was taken.
  std::vector<WorkerActivity> workers;  // One per rank, in rank order.
};

class ParameterServer final {
 public:
  // INVALID_ARGUMENT when num_workers < 1 or the shard is out of range.
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

  // Adds a gradient chunk for `step`, encoded as `dtype` (summed in fp32).
  // `done` receives the chunk's weights of
  // version step + 1 once every worker has pushed, or an error at once:
  // INVALID_ARGUMENT (bad chunk index, size, NaN/Inf), FAILED_PRECONDITION
  // (unknown rank or stale incarnation, wrong step, not initialized),
  // UNAVAILABLE (shutting down). A push the barrier already counted is not
  // counted again; it gets the same answer.
  // The payload may come in pieces (gRPC's slices); it is read in place
  // before Push returns, so the caller may free it then.
  // In an elastic job (`slot` has a generation, see RequireGeneration) the
  // push carries batch shard slot.batch_shard of the step, which the
  // barrier counts in place of the rank: a worker covers absent ranks'
  // shards. INVALID_ARGUMENT for a shard outside [0, num_workers),
  // FAILED_PRECONDITION outside plain sync mode, ABORTED for a generation
  // older than the one required.
  void Push(int rank, int64_t incarnation, int64_t step, int chunk,
            WireDType dtype, absl::Span<const absl::string_view> payload,
            ChunkCallback done, const PushSlot& slot = {});
  void Push(int rank, int64_t incarnation, int64_t step, int chunk,
            WireDType dtype, absl::string_view bytes, ChunkCallback done,
            const PushSlot& slot = {}) {
    Push(rank, incarnation, step, chunk, dtype,
         absl::Span<const absl::string_view>(&bytes, 1), std::move(done), slot);
  }

  // Elastic PS jobs, on the shard hosting the coordinator: its group of
  // workers (kPsGroupName) formed `generation`, or will form it because a
  // member joins or leaves. From now on pushes of older generations are
  // refused (ABORTED: join the group again), and a step they are gathering
  // is given up (nothing applied; its pushes are answered ABORTED). A
  // Leave in such a job requires the next generation. Lower or equal
  // generations: no-op. Other shards only give a step up when a member
  // pushes a newer generation than they have seen, or leaves: they refuse
  // no generation, so a coordinator restarted (numbering from 1 again)
  // never locks them out.
  void RequireGeneration(int64_t generation);

  // `done` receives the chunk's latest weights once their version is at
  // least `min_version` (with `exact`, those of min_version itself where
  // the chunk kept them: ChunkBarrier::Pull). A worker passes its rank and
  // incarnation (checked like a push's); incarnation 0 reads anonymously.
  void Pull(int rank, int64_t incarnation, int chunk, int64_t min_version,
            bool exact, ChunkCallback done);

  // Incarnation 0 lets a rank that never registered (an all-reduce worker)
  // leave.
  absl::Status Leave(int rank, int64_t incarnation);

  ServerStatus GetStatus() const;

  // Adds reply payload bytes to the counters (the transport sends them).
  void CountSent(int64_t bytes) {
    bytes_sent_.fetch_add(bytes, std::memory_order_relaxed);
  }

  // A checkpoint of this shard. In sync mode every chunk is taken at the
  // same version (waiting up to `timeout` for chunks one step behind); in
  // the asynchronous modes each chunk at its own. FAILED_PRECONDITION before
  // version 0, DEADLINE_EXCEEDED when the chunks do not line up in time.
  absl::StatusOr<ShardCheckpoint> Snapshot(absl::Duration timeout);

  // Restores a checkpoint before any worker registers: its signature becomes
  // the job's and its version the current one. FAILED_PRECONDITION naming
  // the difference when it belongs to another layout (shard, shard count,
  // worker count) or model. The job's length stays open until the first
  // registration: a worker whose signature differs only in total_steps,
  // and asks for no fewer steps than the restored version, sets it (a
  // job resumed to train longer, docs/resume.md).
  absl::Status Restore(const ShardCheckpoint& checkpoint);

  // What CheckStepTimeout found: a step gathered for longer than half the
  // timeout (warn) or the whole of it (expired: not applied, its waiting
  // pushes answered ABORTED, the missing ranks evicted).
  struct StepAlarm {
    int64_t step = 0;
    absl::Duration waited;
    std::vector<int> missing;
    bool expired = false;
    // kSsp: `step` is the slowest ranks' next step, which the others' held
    // pushes wait for. Expired without `fail_job`, nothing is given up or
    // evicted: the others go on waiting for those ranks (or a replacement).
    bool ssp = false;
  };

  // Called periodically by the daemon. Reports each step once at half the
  // timeout and once when it expires. With `fail_job` an expired step's
  // waiting pushes get CANCELLED (the job is over) and nobody is evicted;
  // otherwise they get ABORTED (push again) and the missing are evicted.
  std::vector<StepAlarm> CheckStepTimeout(absl::Time now,
                                          absl::Duration timeout,
                                          bool fail_job = false);

  // True once every rank has left; false when `timeout` passes first.
  bool WaitUntilDone(absl::Duration timeout) const;

  // The first step of a drain: registrations, and pushes of a step that no
  // chunk has reached, are refused (UNAVAILABLE), while those of the step
  // some chunks have closed and others still gather are taken, so that the
  // chunks line up at one version for a last Snapshot. In the asynchronous
  // modes every push is refused. Pulls are still answered.
  void StopNewSteps();

  // Answers every waiting push and pull with `reason` (UNAVAILABLE by
  // default) and refuses new ones, so that a transport can shut down
  // without pending calls.
  void Shutdown(const absl::Status& reason =
                    absl::UnavailableError("server is shutting down"));

 private:
  explicit ParameterServer(const ParameterServerOptions& options);

  // Sets up the plan and this shard's chunk barriers for `signature`.
  absl::Status ConfigureLocked(const ModelSignature& signature)
      ABSL_EXCLUSIVE_LOCKS_REQUIRED(mu_);
  absl::StatusOr<Registration> RegisterInternal(
      int rank, const ModelSignature& signature,
      std::vector<ChunkBarrier*>* revoked, std::string* reason)
      ABSL_LOCKS_EXCLUDED(mu_);
  // Register's checks of the caller and its signature's layout.
  absl::Status CheckRegistrationLocked(int rank,
                                       const ModelSignature& signature) const
      ABSL_EXCLUSIVE_LOCKS_REQUIRED(mu_);
  // Sets the job's length after a restore (Restore); FAILED_PRECONDITION
  // when `total_steps` ends before the restored version.
  absl::Status ExtendLocked(int64_t total_steps)
      ABSL_EXCLUSIVE_LOCKS_REQUIRED(mu_);
  // Makes `signature` the job's when there is none yet, or when rank 0
  // brings another one than the provisional one (revoking the others:
  // `revoked`, `reason`); FAILED_PRECONDITION when it differs otherwise.
  absl::Status AdoptSignatureLocked(int rank, const ModelSignature& signature,
                                    std::vector<ChunkBarrier*>* revoked,
                                    std::string* reason)
      ABSL_EXCLUSIVE_LOCKS_REQUIRED(mu_);
  // CheckStepTimeout's parts: the oldest step `chunks` wait on at `now`
  // (expired and ssp not set); the alarm unless its step was said already
  // (`stalled`: an SSP stall, else a warning); giving the step up.
  std::optional<StepAlarm> OldestWait(const std::vector<ChunkBarrier*>& chunks,
                                      absl::Time now) const;
  std::vector<StepAlarm> AlarmOnce(const StepAlarm& alarm, bool stalled)
      ABSL_LOCKS_EXCLUDED(mu_);
  void GiveUpStep(const StepAlarm& alarm, bool fail_job,
                  const std::vector<ChunkBarrier*>& chunks)
      ABSL_LOCKS_EXCLUDED(mu_);
  // Forgets the registrations of ranks other than 0 (made under a signature
  // rank 0 overrules) and returns the barriers to close, failing their
  // waiting pulls.
  std::vector<ChunkBarrier*> RevokeProvisionalLocked(const std::string& reason)
      ABSL_EXCLUSIVE_LOCKS_REQUIRED(mu_);
  absl::Status CheckMemberLocked(int rank, int64_t incarnation) const
      ABSL_EXCLUSIVE_LOCKS_REQUIRED(mu_);
  // Validates rank/incarnation/chunk, and for a push of `step` that the
  // server still takes that step (StopNewSteps); returns the chunk's
  // barrier.
  absl::StatusOr<ChunkBarrier*> FindChunk(int rank, int64_t incarnation,
                                          int chunk, int64_t step = kNotAPush,
                                          const PushSlot& slot = {}) const;
  // A member pushed `generation`: newer than seen, the step being
  // gathered is given up (RequireGeneration).
  void NoteGeneration(int64_t generation) ABSL_LOCKS_EXCLUDED(mu_);
  static absl::Status ReformingError(int64_t generation);
  // Gives up the step each chunk gathers, answering its pushes `why`.
  void GiveUpGathering(const absl::Status& why) ABSL_LOCKS_EXCLUDED(mu_);
  // A push's slot (see Push): OK without a generation.
  absl::Status CheckSlotLocked(const PushSlot& slot) const
      ABSL_EXCLUSIVE_LOCKS_REQUIRED(mu_);
  // The barrier of a chunk this shard owns, or why there is none.
  absl::StatusOr<ChunkBarrier*> OwnedChunkLocked(int chunk) const
      ABSL_EXCLUSIVE_LOCKS_REQUIRED(mu_);
  // The shard's version: the lowest of its chunks' (-1 before version 0).
  int64_t VersionLocked() const ABSL_EXCLUSIVE_LOCKS_REQUIRED(mu_);
  std::vector<ChunkBarrier*> OwnedChunksLocked() const
      ABSL_EXCLUSIVE_LOCKS_REQUIRED(mu_);
  // Records an RPC from `rank` at `when`; a push also names its step.
  void NoteContact(int rank, absl::Time when, int64_t pushed_step = kNotAPush)
      ABSL_LOCKS_EXCLUDED(activity_mu_);

  const ParameterServerOptions options_;
  const int64_t server_incarnation_;
  BarrierCounters counters_;  // Updated without the lock.
  std::atomic<int64_t> bytes_sent_{0};

  mutable absl::Mutex mu_;
  std::optional<ModelSignature> signature_ ABSL_GUARDED_BY(mu_);
  // Until rank 0 registers, the signature is provisional and rank 0's wins.
  bool signature_from_rank0_ ABSL_GUARDED_BY(mu_) = false;
  // Restored, and no worker registered since: the first one may set the
  // job's length (Restore).
  bool length_open_ ABSL_GUARDED_BY(mu_) = false;
  // Why a revoked or evicted incarnation was dropped, to tell it when it
  // calls again.
  absl::flat_hash_map<int64_t, absl::Status> revoked_ ABSL_GUARDED_BY(mu_);
  std::optional<ChunkPlan> plan_ ABSL_GUARDED_BY(mu_);
  std::vector<int64_t> incarnations_ ABSL_GUARDED_BY(mu_);  // 0: none.
  std::vector<bool> finished_ ABSL_GUARDED_BY(mu_);
  bool shutting_down_ ABSL_GUARDED_BY(mu_) = false;
  // StopNewSteps: registrations are refused, and pushes of this step or
  // later.
  bool draining_ ABSL_GUARDED_BY(mu_) = false;
  int64_t step_limit_ ABSL_GUARDED_BY(mu_) =
      std::numeric_limits<int64_t>::max();
  // By global chunk index; null for chunks of other shards. Barriers guard
  // their own contents; they are never destroyed before the server, so a
  // pointer taken under mu_ stays valid.
  std::vector<std::unique_ptr<ChunkBarrier>> chunks_ ABSL_GUARDED_BY(mu_);
  std::vector<std::unique_ptr<ChunkBarrier>> retired_chunks_
      ABSL_GUARDED_BY(mu_);
  // RequireGeneration's: pushes of an older group generation are refused.
  int64_t min_generation_ ABSL_GUARDED_BY(mu_) = 0;
  // The newest generation required or pushed by a member; 0: not elastic.
  int64_t seen_generation_ ABSL_GUARDED_BY(mu_) = 0;
  int64_t warned_step_ ABSL_GUARDED_BY(mu_) = -1;
  int64_t ssp_stalled_step_ ABSL_GUARDED_BY(mu_) = -1;

  // Its own lock: taken once per push, never with mu_.
  mutable absl::Mutex activity_mu_;
  std::vector<WorkerActivity> activity_ ABSL_GUARDED_BY(activity_mu_);
  // By rank: when its first push of last_step arrived.
  std::vector<absl::Time> step_started_ ABSL_GUARDED_BY(activity_mu_);
};

}  // namespace lockstep

#endif  // LOCKSTEP_SERVER_CORE_PARAMETER_SERVER_H_
