// The weights, optimizer state and synchronization of one chunk of the flat
// parameter vector on one server shard.
//
// ChunkBarrier is a façade: it owns the lock, the chunk's ChunkCore (its
// fp32 master weights and their versions, its optimizer and its gradient
// sum) and the SyncRule the job's SyncPolicy chose at construction
// (sync_rule.h says how each mode turns pushes into updates). The order of
// a synchronous step's sum is the job's SumOrder (accumulator.h).
// A state chunk (batch-norm moving statistics, Chunk::state) is not
// optimized: its new value is the mean of the values pushed for it.
// A published version is an immutable snapshot; versions only increase.
//
// Thread-safe. Callbacks run on the calling thread after the internal lock is
// released.
#ifndef LOCKSTEP_SERVER_CORE_CHUNK_BARRIER_H_
#define LOCKSTEP_SERVER_CORE_CHUNK_BARRIER_H_

#include <atomic>
#include <cstdint>
#include <memory>
#include <optional>
#include <vector>

#include "absl/base/thread_annotations.h"
#include "absl/status/status.h"
#include "absl/strings/string_view.h"
#include "absl/synchronization/mutex.h"
#include "absl/time/time.h"
#include "absl/types/span.h"
#include "common/base/env.h"
#include "common/base/work_pool.h"
#include "common/model/chunk_plan.h"
#include "common/model/model_signature.h"
#include "common/optim/optimizer.h"
#include "common/wire/wire_codec.h"
#include "server/core/accumulator.h"
#include "server/core/barrier_counters.h"
#include "server/core/barrier_observer.h"
#include "server/core/checkpoint.h"
#include "server/core/chunk_core.h"
#include "server/core/chunk_versions.h"
#include "server/core/sync_rule.h"

namespace lockstep {

class ChunkBarrier final {
 public:
  // `counters`, `observer` and `pool` (both may be null) and `env` are not
  // owned and outlive the barrier. With a pool, a push's check and sum and
  // the optimizer's step are split over its threads in blocks of
  // kParallelGrain elements (element-wise: the same bits either way).
  // `env` is the clock of the observer's times, the counters' durations and
  // when an SSP push began to wait. `optimizer` (validated) and the sum
  // are allocated when the weights come (Initialize, Restore).
  ChunkBarrier(const Chunk& chunk, const SyncPolicy& policy, int num_workers,
               const OptimizerConfig& optimizer, BarrierCounters* counters,
               BarrierObserver* observer = nullptr,
               SumOrder sum_order = SumOrder::kArrival,
               WorkPool* pool = nullptr, Env* env = Env::Default());

  static constexpr int64_t kParallelGrain = Accumulator::kParallelGrain;

  // Stores version 0 (fp32 values; size checked by the caller) and answers
  // waiting pulls. FAILED_PRECONDITION when already initialized, unless with
  // the same bytes at version 0 (a re-sent initialization: OK, no change).
  absl::Status Initialize(absl::string_view fp32_bytes);

  // A gradient from `rank` for `step` (its size checked by the caller);
  // `done` gets the answer (see sync_rule.h). A push to be summed is
  // checked for NaN and Inf as it is summed (INVALID_ARGUMENT, nothing
  // changed).
  void Push(int rank, int64_t step, WireDType dtype,
            absl::Span<const absl::string_view> payload, absl::Time arrival,
            ChunkCallback done);

  // `done` gets the latest weights once their version is >= min_version;
  // OUT_OF_RANGE for a version past the next one.
  // With `exact` in sync mode, a chunk one version past min_version answers
  // with the weights of min_version while it still has them: from closing
  // a step until the first push of the next (the accumulator, idle then,
  // holds them). A worker that registers again in the middle of a step,
  // after some chunks closed it, so recomputes it from the very weights it
  // was computed from.
  void Pull(int64_t min_version, bool exact, ChunkCallback done);

  // The chunk's weights, optimizer slots and version, for a checkpoint;
  // nullopt before initialization.
  std::optional<ChunkState> Export();
  // Replaces weights, optimizer slots and version (before any push);
  // INVALID_ARGUMENT when sizes or slot names do not fit.
  absl::Status Restore(const ChunkState& state);

  // Checkpoints at versions every shard shares: from now on the state of
  // each published version that is a positive multiple of `every` is kept
  // (a pin) until TakePinned takes it. While one is kept, later multiples
  // are not pinned (pins_skipped counts them), so that the chunks of a
  // shard, taken together, always hold one version. Set before the
  // barrier is in use; 0 (the default) pins nothing.
  void PinEvery(int64_t every) ABSL_LOCKS_EXCLUDED(mu_);
  // The pinned version, or -1 when none is kept.
  int64_t PinnedVersion() const ABSL_LOCKS_EXCLUDED(mu_);
  // Hands the pin over (nullopt when none is kept).
  std::optional<ChunkState> TakePinned() ABSL_LOCKS_EXCLUDED(mu_);
  // Multiples of the pin interval published while a pin was kept.
  int64_t pins_skipped() const ABSL_LOCKS_EXCLUDED(mu_);

  // Answers every waiting call with `status` and refuses new ones.
  void Close(const absl::Status& status);
  // After Close: frees the weights, the accumulator and the optimizer's
  // state, which a closed barrier never reads again (every call is answered
  // with the close status). The object itself stays valid for callers
  // still holding it. No-op while open.
  void ReleaseMemory();

  // kSync: the step being gathered, since when, and who has not pushed it.
  // kSsp: the slowest ranks' next step, since when a push has been held
  // for it, and those ranks. nullopt when no push is waiting.
  using Gathering = ChunkGathering;
  std::optional<Gathering> Pending() const;

  // kSync: gives up on `step` if it is still being gathered: its waiting
  // pushes get `status` and their gradients are forgotten (nothing is
  // applied). kSsp: the pushes held for the slowest (applied already) get
  // `status`. Returns whether it did.
  bool Expire(int64_t step, const absl::Status& status);
  // kSsp: leaves those of `ranks` that are the slowest out of the wait
  // (they were evicted) and answers the pushes held only for them; see
  // SyncRule::Excuse. False in the other modes.
  bool Excuse(absl::Span<const int> ranks);

  // Latest published version (-1 before initialization). Lock-free.
  int64_t version() const { return published_version_.load(); }
  // Whether `rank` has pushed the step now being gathered (kSync), or is
  // waiting for the slowest (kSsp).
  bool HasPushed(int rank) const;

  const Chunk& chunk() const { return chunk_; }

 private:
  // What a push did, for the observer.
  struct PushReport {
    bool summed = false;
    absl::Time sum_start, sum_end;
    std::optional<BarrierObserver::Applied> applied;
    std::vector<absl::Time> arrivals;  // What applied->arrivals spans.
  };
  // A push refused (closed, no weights yet, a negative step, or by the
  // rule: push_checks.h gives the order), or what the rule says of it.
  absl::StatusOr<Admission> AdmitLocked(int rank, int64_t step) const
      ABSL_EXCLUSIVE_LOCKS_REQUIRED(mu_);
  // A push the rule admitted: checks and sums it unless it was counted
  // already, then hands it (and `done`) to the rule to wait or apply. A
  // refusal (a NaN or Inf) is returned, `done` left to the caller.
  absl::Status AcceptLocked(int rank, int64_t step, WireDType dtype,
                            absl::Span<const absl::string_view> payload,
                            absl::Time arrival, ChunkCallback& done,
                            ChunkAnswers* answers, PushReport* report)
      ABSL_EXCLUSIVE_LOCKS_REQUIRED(mu_);
  // The chunk's state now (initialized).
  ChunkState ExportLocked() ABSL_EXCLUSIVE_LOCKS_REQUIRED(mu_);
  // Pins the version just published when it is due (PinEvery).
  void MaybePinLocked() ABSL_EXCLUSIVE_LOCKS_REQUIRED(mu_);
  // Makes `weights` version `version`, answering every waiting pull, and
  // pins it when due.
  void PublishLocked(int64_t version,
                     std::shared_ptr<const std::vector<float>> weights,
                     ChunkAnswers* answers) ABSL_EXCLUSIVE_LOCKS_REQUIRED(mu_);
  // Tells the observer (if any) what `report` says, after the lock.
  void Report(int rank, int64_t step, const PushReport& report) const;

  const Chunk chunk_;
  BarrierCounters* const counters_;  // Not owned.
  BarrierObserver* const observer_;  // Not owned; may be null.
  // The published version, mirrored for the lock-free version().
  std::atomic<int64_t> published_version_{-1};

  mutable absl::Mutex mu_;
  ChunkCore core_ ABSL_GUARDED_BY(mu_);
  const std::unique_ptr<SyncRule> rule_ ABSL_GUARDED_BY(mu_);
  bool closed_ ABSL_GUARDED_BY(mu_) = false;
  absl::Status close_status_ ABSL_GUARDED_BY(mu_);
  int64_t pin_every_ ABSL_GUARDED_BY(mu_) = 0;
  std::optional<ChunkState> pinned_ ABSL_GUARDED_BY(mu_);
  int64_t pins_skipped_ ABSL_GUARDED_BY(mu_) = 0;
};

}  // namespace lockstep

#endif  // LOCKSTEP_SERVER_CORE_CHUNK_BARRIER_H_
