// The weights, optimizer state and synchronization of one chunk of the flat
// parameter vector on one server shard.
//
// ChunkBarrier owns the chunk's fp32 master weights, its optimizer, a gradient
// accumulator and the waiting callbacks. How pushes turn into updates is the
// job's SyncPolicy:
//   kSync   every step waits for W - b distinct workers (b = backup workers),
//           sums their gradients as they arrive, divides by how many came,
//           applies the optimizer once and answers all of them with the new
//           version. A push arriving after its step closed (a straggler beaten
//           by the backups) is dropped, counted, and answered with the
//           current weights so the straggler catches up.
//   kAsync  every push is applied at once on its own (a re-sent push of a
//           rank's last step is answered, not applied again) and answered with
//           the result; the version counts applied gradients.
//   kSsp    like kAsync, but the answer to a push for step s is held until
//           every worker has pushed step s - k (k = staleness): no worker runs
//           more than k steps ahead of the slowest.
// The order of a synchronous step's sum is the job's SumOrder (below).
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
#include <functional>
#include <memory>
#include <optional>
#include <string>
#include <utility>
#include <vector>

#include "absl/base/thread_annotations.h"
#include "absl/status/statusor.h"
#include "absl/strings/string_view.h"
#include "absl/synchronization/mutex.h"
#include "absl/time/time.h"
#include "absl/types/span.h"
#include "common/chunk_plan.h"
#include "common/env.h"
#include "common/model_signature.h"
#include "common/optimizer.h"
#include "common/wire_codec.h"
#include "common/work_pool.h"
#include "server/core/barrier_observer.h"
#include "server/core/checkpoint.h"

namespace lockstep {

// The bf16 or fp16 encoding of one published version, made by the first
// reply that needs it and shared by the replies in flight with it: W
// workers' replies to a step cost one encode and one buffer, not W. It is
// held only by those replies (the chunk keeps a weak reference), so it is
// freed once they are sent; a later reply encodes again. Thread-safe.
class EncodedWeights {
 public:
  // `values` encoded as `dtype` (bf16 or fp16); `values` must be the
  // version's weights, the same on every call.
  std::shared_ptr<const std::string> Get(WireDType dtype,
                                         const std::vector<float>& values);

 private:
  absl::Mutex mu_;
  std::weak_ptr<const std::string> bf16_ ABSL_GUARDED_BY(mu_);
  std::weak_ptr<const std::string> fp16_ ABSL_GUARDED_BY(mu_);
};

// The weights of one chunk at one version. Immutable once published.
struct ChunkSnapshot {
  int chunk = 0;
  int64_t version = 0;
  std::shared_ptr<const std::vector<float>> values;
  // Encodings of `values` for the replies; never null in a snapshot that
  // ChunkBarrier hands out.
  std::shared_ptr<EncodedWeights> encoded;
};

using ChunkCallback = std::function<void(absl::StatusOr<ChunkSnapshot>)>;

// The order in which a synchronous step sums its workers' gradients (the
// server's --sum_order). Float addition is not associative: with three or
// more workers the order changes the last bits of the result.
//   kArrival  each push is added as it arrives, then released: the server
//             holds one accumulator per chunk whatever W is.
//   kRank     ascending rank, whatever the arrival order, so that a run (or
//             a run recovered from a fault) gives the same bits every time.
//             A push that arrives before a lower rank's is copied and held
//             until that one is summed: up to W - 1 extra copies of a
//             chunk's payload. With one or two workers both orders are the
//             same sum and nothing is held.
enum class SumOrder { kArrival, kRank };

// Counters shared by all chunks of a shard (see ServerCounters).
struct BarrierCounters {
  std::atomic<int64_t> pushes_accepted{0};
  std::atomic<int64_t> pushes_refused{0};
  std::atomic<int64_t> pushes_dropped_late{0};
  std::atomic<int64_t> chunk_steps{0};
  std::atomic<int64_t> accumulate_ns{0};
  std::atomic<int64_t> apply_ns{0};
  std::atomic<int64_t> barrier_wait_ns{0};
  std::atomic<int64_t> bytes_received{0};
  // pushes_refused by absl::StatusCode: OK (0) through UNAUTHENTICATED.
  static constexpr int kStatusCodes =
      static_cast<int>(absl::StatusCode::kUnauthenticated) + 1;
  std::atomic<int64_t> pushes_refused_by_code[kStatusCodes] = {};

  void CountRefused(absl::StatusCode code) {
    pushes_refused.fetch_add(1, std::memory_order_relaxed);
    const int index = static_cast<int>(code);
    const int unknown = static_cast<int>(absl::StatusCode::kUnknown);
    pushes_refused_by_code[index >= 0 && index < kStatusCodes ? index
                                                              : unknown]
        .fetch_add(1, std::memory_order_relaxed);
  }
};

class ChunkBarrier final {
 public:
  // `counters`, `observer` and `pool` (both may be null) and `env` are not
  // owned and outlive the barrier. With a pool, a push's check and sum and
  // the optimizer's step are split over its threads in blocks of
  // kParallelGrain elements (element-wise: the same bits either way).
  // `env` is the clock of the observer's times, the counters' durations and
  // when an SSP push began to wait.
  ChunkBarrier(const Chunk& chunk, const SyncPolicy& policy, int num_workers,
               std::unique_ptr<Optimizer> optimizer, BarrierCounters* counters,
               BarrierObserver* observer = nullptr,
               SumOrder sum_order = SumOrder::kArrival,
               WorkPool* pool = nullptr, Env* env = Env::Default());

  // 256 Ki elements: a block is 1 MiB of fp32, some 100 us of work, far
  // more than waking a helper costs; a smaller chunk (the tutorial MLP's
  // 101,770 values, --chunk_bytes=auto's chunks up to 1 MiB) runs on the
  // calling thread alone.
  static constexpr int64_t kParallelGrain = int64_t{1} << 18;

  // Stores version 0 (fp32 values; size checked by the caller) and answers
  // waiting pulls. FAILED_PRECONDITION when already initialized, unless with
  // the same bytes at version 0 (a re-sent initialization: OK, no change).
  absl::Status Initialize(absl::string_view fp32_bytes);

  // A gradient from `rank` for `step` (its size checked by the caller);
  // `done` gets the answer (see the class comment). A push to be summed is
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
  struct Gathering {
    int64_t step = 0;
    absl::Time since;
    std::vector<int> missing;
  };
  std::optional<Gathering> Pending() const;

  // kSync: gives up on `step` if it is still being gathered: its waiting
  // pushes get `status` and their gradients are forgotten (nothing is
  // applied). kSsp: the pushes held for the slowest (applied already) get
  // `status`. Returns whether it did.
  bool Expire(int64_t step, const absl::Status& status);

  // Latest published version (-1 before initialization). Lock-free.
  int64_t version() const { return published_version_.load(); }
  // Whether `rank` has pushed the step now being gathered (kSync), or is
  // waiting for the slowest (kSsp).
  bool HasPushed(int rank) const;

  const Chunk& chunk() const { return chunk_; }

 private:
  // Callbacks to run once the lock is released.
  struct Answers {
    std::vector<std::pair<ChunkCallback, absl::StatusOr<ChunkSnapshot>>> calls;
    void Add(ChunkCallback cb, absl::StatusOr<ChunkSnapshot> result) {
      calls.emplace_back(std::move(cb), std::move(result));
    }
    void Run() {
      for (auto& [cb, result] : calls) cb(std::move(result));
    }
  };

  // What a push did, for the observer.
  struct PushReport {
    bool summed = false;
    absl::Time sum_start, sum_end;
    std::optional<BarrierObserver::Applied> applied;
    std::vector<absl::Time> arrivals;  // What applied->arrivals spans.
  };
  // A push for the step being gathered (sync) or any step (async, SSP):
  // checks and sums it unless it was counted already, then waits or
  // applies as the mode says.
  void AcceptLocked(int rank, int64_t step, WireDType dtype,
                    absl::Span<const absl::string_view> payload,
                    absl::Time arrival, ChunkCallback done, Answers* answers,
                    PushReport* report) ABSL_EXCLUSIVE_LOCKS_REQUIRED(mu_);
  void PushSync(int rank, int64_t step, absl::Time arrival, ChunkCallback done,
                Answers* answers) ABSL_EXCLUSIVE_LOCKS_REQUIRED(mu_);
  // `counted`: a re-sent push of the rank's last step, not applied again.
  void PushAsync(int rank, int64_t step, bool counted, ChunkCallback done,
                 Answers* answers) ABSL_EXCLUSIVE_LOCKS_REQUIRED(mu_);
  // Checks a push's payload (unless `checked`: it was, when it was held)
  // and adds it into the accumulator (writing over it when it holds the
  // previous version's weights); INVALID_ARGUMENT for a NaN or Inf, with
  // the accumulator unchanged.
  absl::Status SumLocked(absl::Span<const absl::string_view> payload,
                         WireDType dtype, bool checked)
      ABSL_EXCLUSIVE_LOCKS_REQUIRED(mu_);
  // SumOrder::kRank: checks, then sums or holds the new push of `rank`,
  // then sums the held pushes that now follow the summed ranks without a
  // gap.
  absl::Status SumInRankOrderLocked(int rank,
                                    absl::Span<const absl::string_view> payload,
                                    WireDType dtype)
      ABSL_EXCLUSIVE_LOCKS_REQUIRED(mu_);
  // SumOrder::kRank, at a step's close: sums what is still held (ranks after
  // one that did not push, with backup workers), in ascending rank.
  void SumHeldLocked() ABSL_EXCLUSIVE_LOCKS_REQUIRED(mu_);
  // Sums one held push and releases its copy.
  struct HeldPush;
  void SumHeldPushLocked(std::optional<HeldPush>& held)
      ABSL_EXCLUSIVE_LOCKS_REQUIRED(mu_);
  void ForgetHeldLocked() ABSL_EXCLUSIVE_LOCKS_REQUIRED(mu_);
  // Drops the exact pulls' snapshot of the accumulator (it is rewritten).
  void ForgetPreviousLocked() ABSL_EXCLUSIVE_LOCKS_REQUIRED(mu_);
  // Applies the accumulator times `scale` (1 / the pushes summed) as step
  // `version_`, publishes version_ + 1 and answers the pulls it satisfies.
  void ApplyAndPublishLocked(float scale, Answers* answers)
      ABSL_EXCLUSIVE_LOCKS_REQUIRED(mu_);
  ChunkSnapshot SnapshotLocked() const ABSL_EXCLUSIVE_LOCKS_REQUIRED(mu_) {
    return ChunkSnapshot{chunk_.index, version_, published_, encoded_};
  }
  // Makes `weights` the published version (its encodings made afresh).
  void PublishLocked(std::shared_ptr<const std::vector<float>> weights)
      ABSL_EXCLUSIVE_LOCKS_REQUIRED(mu_);
  int64_t MinClockLocked() const ABSL_EXCLUSIVE_LOCKS_REQUIRED(mu_);

  const Chunk chunk_;
  const SyncPolicy policy_;
  const int num_workers_;
  // SumOrder::kRank in sync mode with more than two workers.
  const bool rank_order_;
  BarrierCounters* const counters_;  // Not owned.
  BarrierObserver* const observer_;  // Not owned; may be null.
  WorkPool* const pool_;             // Not owned; may be null.
  Env* const env_;                   // Not owned.
  std::atomic<int64_t> published_version_{-1};

  mutable absl::Mutex mu_;
  std::unique_ptr<Optimizer> optimizer_ ABSL_GUARDED_BY(mu_);
  // Between a step's close and the next step's first push (sync mode), the
  // idle accumulator holds the weights of the version before (see Pull);
  // the first push then writes over them instead of adding.
  std::vector<float> accumulator_ ABSL_GUARDED_BY(mu_);
  bool accumulator_holds_previous_ ABSL_GUARDED_BY(mu_) = false;
  // The snapshot exact pulls share while the accumulator holds the previous
  // version (made by the first of them); null otherwise.
  std::shared_ptr<const std::vector<float>> previous_ ABSL_GUARDED_BY(mu_);
  std::shared_ptr<EncodedWeights> previous_encoded_ ABSL_GUARDED_BY(mu_);
  bool initialized_ ABSL_GUARDED_BY(mu_) = false;
  bool closed_ ABSL_GUARDED_BY(mu_) = false;
  absl::Status close_status_ ABSL_GUARDED_BY(mu_);
  int64_t version_ ABSL_GUARDED_BY(mu_) = -1;
  // The latest version: the master weights, immutable once published.
  std::shared_ptr<const std::vector<float>> published_ ABSL_GUARDED_BY(mu_);
  std::shared_ptr<EncodedWeights> encoded_ ABSL_GUARDED_BY(mu_);
  // kSync: who pushed the step being gathered, and the step before.
  std::vector<bool> pushed_ ABSL_GUARDED_BY(mu_);
  std::vector<bool> pushed_previous_ ABSL_GUARDED_BY(mu_);
  int num_pushed_ ABSL_GUARDED_BY(mu_) = 0;
  // kSync: the earliest and latest arrival of the step's counted pushes.
  absl::Time first_push_ ABSL_GUARDED_BY(mu_);
  absl::Time last_push_ ABSL_GUARDED_BY(mu_);
  std::vector<ChunkCallback> push_waiters_ ABSL_GUARDED_BY(mu_);
  // rank_order_: the ranks below next_rank_ are summed; a later rank's push
  // that came early waits in held_ (a copy of its payload), by rank.
  struct HeldPush {
    WireDType dtype;
    std::string bytes;
  };
  std::vector<std::optional<HeldPush>> held_ ABSL_GUARDED_BY(mu_);
  int next_rank_ ABSL_GUARDED_BY(mu_) = 0;
  // For the observer: kSync arrivals of the step being gathered, by rank,
  // and when the last two versions were applied.
  std::vector<absl::Time> arrivals_ ABSL_GUARDED_BY(mu_);
  absl::Time apply_start_ ABSL_GUARDED_BY(mu_);
  absl::Time published_at_ ABSL_GUARDED_BY(mu_) = absl::InfinitePast();
  absl::Time previous_published_at_ ABSL_GUARDED_BY(mu_) =
      absl::InfinitePast();
  // kAsync and kSsp: one past the latest step each rank has pushed.
  std::vector<int64_t> clock_ ABSL_GUARDED_BY(mu_);
  // kSsp: pushes held for the slowest: answered once the slowest has pushed
  // `until`; `since` is when the push came.
  struct SspWaiter {
    int64_t until;
    absl::Time since;
    ChunkCallback done;
  };
  std::vector<SspWaiter> ssp_waiters_ ABSL_GUARDED_BY(mu_);
  std::vector<std::pair<int64_t, ChunkCallback>> pull_waiters_
      ABSL_GUARDED_BY(mu_);
};

}  // namespace lockstep

#endif  // LOCKSTEP_SERVER_CORE_CHUNK_BARRIER_H_
