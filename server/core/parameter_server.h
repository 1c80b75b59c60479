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
// ParameterServer wires parts that each have one job, one lock and their
// own tests: Membership (ranks and incarnations), StepBarriers (the job's
// signature and this shard's ChunkBarriers, draining and shutting down),
// GroupGenerations (an elastic job's group generations), ShardRecovery
// (step timeouts, snapshots) and ActivityLog (what each rank did last). It
// has no lock of its own.
//
// Lock order: StepBarriers' lock may be held while taking Membership's (a
// registration) or a ChunkBarrier's (a restore); every other part's lock is
// a leaf, never held while calling another part. A push takes Membership's
// lock, the ActivityLog's and its barrier's, one after the other, and
// reads the rest without a lock.
//
// Thread-safe. Callbacks run on the thread that completes them (the pusher
// that closes a barrier, or the caller) and never under an internal lock.
#ifndef LOCKSTEP_SERVER_CORE_PARAMETER_SERVER_H_
#define LOCKSTEP_SERVER_CORE_PARAMETER_SERVER_H_

#include <atomic>
#include <cstdint>
#include <memory>
#include <optional>
#include <string>
#include <utility>
#include <vector>

#include "absl/status/status.h"
#include "absl/status/statusor.h"
#include "absl/strings/str_cat.h"
#include "absl/strings/string_view.h"
#include "absl/synchronization/mutex.h"
#include "absl/time/time.h"
#include "absl/types/span.h"
#include "common/base/leave_note.h"
#include "common/model/model_signature.h"
#include "common/rpc/group_membership.h"
#include "common/rpc/step_report.h"
#include "common/wire/wire_codec.h"
#include "server/core/activity_log.h"
#include "server/core/barrier_counters.h"
#include "server/core/checkpoint.h"
#include "server/core/chunk_barrier.h"
#include "server/core/group_generations.h"
#include "server/core/membership.h"
#include "server/core/metric_rounds.h"
#include "server/core/push_checks.h"
#include "server/core/server_options.h"
#include "server/core/shard_recovery.h"
#include "server/core/step_barriers.h"

namespace lockstep {

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

  // The job's plan gives this shard no chunk (too few values for the
  // shards: common/model/chunk_plan.h): it never holds a version, and
  // workers call it only to register and to leave.
  bool OwnsNoChunk() const { return signature.has_value() && num_chunks == 0; }
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
  // leave. A member that finished while a synchronous step still needs
  // its gradient (the ranks ran different numbers of steps) fails that
  // step and every later push with FAILED_PRECONDITION naming it.
  absl::Status Leave(int rank, int64_t incarnation, const LeaveNote& note = {});

  // The coordinator formed `generation` of `group` with `members` (none:
  // a member wants the next one). The elastic PS group's makes this shard
  // require it (RequireGeneration). A member that left (an all-reduce
  // rank's Leave with incarnation 0) is in the job again, so the server
  // does not end when the others leave (Membership::Returned).
  void GroupFormed(const std::string& group, int64_t generation,
                   const std::vector<int>& members) {
    if (group == kPsGroupName) RequireGeneration(generation);
    for (int rank : members) members_.Returned(rank);
  }

  // An all-reduce rank's reports of its steps (Coordinator.ReportSteps),
  // for the straggler verdict (ActivityLog::NoteReports); INVALID_ARGUMENT
  // for a rank outside the job, FAILED_PRECONDITION once a model is
  // registered (a parameter-server job).
  absl::Status NoteStepReports(int rank, absl::Span<const StepReport> reports) {
    if (rank < 0 || rank >= options_.num_workers) {
      return absl::InvalidArgumentError(
          absl::StrCat("rank ", rank, " is outside the job's ",
                       options_.num_workers, " workers"));
    }
    if (barriers_.layout() != nullptr) {
      // A parameter-server job: its pushes carry the reports, and the
      // window counts their arrivals, which these would overwrite.
      return absl::FailedPreconditionError(
          "this job pushes to the servers, whose pushes carry its reports");
    }
    activity_.NoteReports(rank, options_.env->Now(), reports);
    return absl::OkStatus();
  }

  // Rank `rank`'s values for its average round `round` (MetricRounds);
  // shard 0 keeps them. `done` gets the mean over the workers.
  void Average(int rank, int64_t incarnation, int64_t round,
               const std::string& name, std::vector<double> values,
               MetricRounds::Callback done);

  // The ranks whose last word was that they failed (LeaveNote) and that
  // no replacement has registered for since, with what they said.
  std::vector<std::pair<int, LeaveNote>> FailedRanks() const {
    return members_.Ends(LeaveReason::kFailed);
  }

  ServerStatus GetStatus() const;

  // Adds reply payload bytes to the counters (the transport sends them).
  void CountSent(int64_t bytes) {
    bytes_sent_.fetch_add(bytes, std::memory_order_relaxed);
  }

  // A checkpoint of this shard. In sync mode every chunk is taken at the
  // same version (waiting up to `timeout` for chunks one step behind); in
  // the asynchronous modes each chunk at its own. FAILED_PRECONDITION before
  // version 0, DEADLINE_EXCEEDED when the chunks do not line up in time.
  // With `lined_up` false every chunk is taken as it is, in any mode,
  // without waiting (the version is the lowest chunk's): what a standby is
  // sent while workers wait for a chunk's answer (server/daemon/
  // replication_source.h).
  absl::StatusOr<ShardCheckpoint> Snapshot(absl::Duration timeout,
                                           bool lined_up = true);

  // The state of the newest version that every chunk has pinned (sync mode
  // with ParameterServerOptions::checkpoint_every_steps), handed over:
  // the versions every shard checkpoints. nullopt until every chunk holds
  // one.
  std::optional<ShardCheckpoint> TakePinned() { return recovery_.TakePinned(); }
  // Whether the chunks pin versions for checkpoints: sync mode with
  // checkpoint_every_steps.
  bool PinsCheckpoints() const;
  // Multiples of checkpoint_every_steps that were not pinned because the
  // one before had not been taken yet (summed over the chunks).
  int64_t PinsSkipped() const;

  // A synchronous job's shards went apart (one restored an older
  // checkpoint than the others hold): rank `rank` asks this shard, seen
  // at version `from`, to go back to `checkpoint` (of this shard, the
  // same model, an older version), the newest version every shard holds.
  // Every rank must register again (its calls get ABORTED) and the steps
  // after it are computed again. ABORTED when the shard is below `from`
  // (the request is stale: another rank's came first); FAILED_PRECONDITION
  // outside sync mode or for another model; the caller is checked like a
  // push's.
  absl::Status StepBack(int rank, int64_t incarnation, int64_t from,
                        const ShardCheckpoint& checkpoint);

  // Restores a checkpoint before any worker registers: its signature becomes
  // the job's and its version the current one. FAILED_PRECONDITION naming
  // the difference when it belongs to another layout (shard, shard count,
  // worker count) or model. The job's length stays open until the first
  // registration: a worker whose signature differs only in total_steps,
  // and asks for no fewer steps than the restored version, sets it (a
  // job resumed to train longer, docs/resume.md).
  absl::Status Restore(const ShardCheckpoint& checkpoint);

  using StepAlarm = ::lockstep::StepAlarm;

  // Called periodically by the daemon. Reports each step once at half the
  // timeout and once when it expires. With `fail_job` an expired step's
  // waiting pushes get CANCELLED (the job is over) and nobody is evicted;
  // otherwise they get ABORTED (push again) and the missing are evicted
  // (kSsp: the held pushes, applied already, are answered instead).
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

  // Validates rank/incarnation/chunk, and for a push of `step` that the
  // server still takes that step (StopNewSteps) and its slot; returns the
  // chunk's barrier. The checks run in push_checks.h's order.
  absl::StatusOr<ChunkBarrier*> FindChunk(int rank, int64_t incarnation,
                                          int chunk, int64_t step = kNotAPush,
                                          const PushSlot& slot = {}) const;

  // A member finished: in a synchronous job whose steps need it, the
  // steps are over for everyone (Leave).
  void NoteFinished(int rank);

  const ParameterServerOptions options_;
  BarrierCounters counters_;  // Updated without a lock.
  // Set once, by NoteFinished: every later push is refused with it.
  std::atomic<bool> steps_ended_{false};
  mutable absl::Mutex ended_mu_;
  absl::Status steps_ended_why_ ABSL_GUARDED_BY(ended_mu_);
  std::atomic<int64_t> bytes_sent_{0};

  Membership members_;
  StepBarriers barriers_;
  GroupGenerations generations_;
  ShardRecovery recovery_;
  ActivityLog activity_;
  MetricRounds metrics_;
};

}  // namespace lockstep

#endif  // LOCKSTEP_SERVER_CORE_PARAMETER_SERVER_H_
