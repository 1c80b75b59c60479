// The job's model on one shard: its signature and a ChunkBarrier for each
// chunk of the flat parameter vector that ChunkPlan gives this shard, with
// the bookkeeping of the steps they gather (draining, shutting down, giving
// a step up).
//
// StepBarriers adopts the job's signature (rank 0's, or a provisional one
// until rank 0 comes; or a restored checkpoint's) and builds the barriers
// for it. Each configuration is published as an immutable Layout, which the
// push path reads without a lock; layouts, like the barriers they hold, live
// as long as this object, so a pointer to one stays valid.
//
// Thread-safe. Its lock is taken by registrations, restores, drains and
// shutdowns, never by a push or a pull. Lock order (parameter_server.h):
// StepBarriers' lock may be held while taking Membership's (a signature's
// adoption, the revocations it makes and the incarnation it admits are one
// step) and a barrier's (restoring its state); nothing is called with it
// held that calls back here. Callbacks never run under it.
#ifndef LOCKSTEP_SERVER_CORE_STEP_BARRIERS_H_
#define LOCKSTEP_SERVER_CORE_STEP_BARRIERS_H_

#include <atomic>
#include <cstdint>
#include <limits>
#include <memory>
#include <optional>
#include <string>
#include <utility>
#include <vector>

#include "absl/base/thread_annotations.h"
#include "absl/status/status.h"
#include "absl/status/statusor.h"
#include "absl/synchronization/mutex.h"
#include "absl/types/span.h"
#include "common/model/chunk_plan.h"
#include "common/model/model_signature.h"
#include "common/optim/optimizer.h"
#include "server/core/barrier_counters.h"
#include "server/core/checkpoint.h"
#include "server/core/chunk_barrier.h"
#include "server/core/membership.h"
#include "server/core/server_options.h"

namespace lockstep {

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

class StepBarriers final {
 public:
  // One configuration of the barriers; immutable once published (the
  // barriers guard their own contents).
  struct Layout {
    Layout(const SyncPolicy& sync, ChunkPlan plan)
        : sync(sync), plan(std::move(plan)) {}
    SyncPolicy sync;  // The signature's; the same for its whole life.
    ChunkPlan plan;
    // By global chunk index; null for chunks of other shards.
    std::vector<std::unique_ptr<ChunkBarrier>> chunks;
    std::vector<ChunkBarrier*> owned;  // This shard's, in index order.
  };
  // The barriers a registration replaced, to close (failing their waiting
  // pulls with `reason`) once no lock is held.
  struct Revocation {
    std::vector<ChunkBarrier*> barriers;
    std::string reason;
  };
  // What GetStatus and Snapshot read at one time.
  struct View {
    std::optional<ModelSignature> signature;
    int64_t version = -1;
    std::vector<ChunkBarrier*> owned;
  };

  // `options` (its pointers not owned, outliving this) and `counters`
  // (not owned, updated by the barriers) are handed to every barrier.
  StepBarriers(const ParameterServerOptions& options,
               BarrierCounters* counters);

  StepBarriers(const StepBarriers&) = delete;
  StepBarriers& operator=(const StepBarriers&) = delete;

  // The push path's reads, lock-free. The layout is null until a signature
  // is adopted.
  const Layout* layout() const {
    return layout_.load(std::memory_order_acquire);
  }
  bool shutting_down() const {
    return shutting_down_.load(std::memory_order_acquire);
  }
  // Pushes of this step or later are refused (StopNewSteps).
  int64_t step_limit() const {
    return step_limit_.load(std::memory_order_acquire);
  }
  // The barrier of chunk `chunk` in `layout` (may be null), or
  // INVALID_ARGUMENT: out of range, or another shard's.
  absl::StatusOr<ChunkBarrier*> Owned(const Layout* layout, int chunk) const;
  // The shard's version: the lowest of its chunks' (-1 before version 0).
  static int64_t Version(const Layout* layout);

  // Register's part: checks the caller (UNAVAILABLE while draining or
  // shutting down, INVALID_ARGUMENT for a rank out of range,
  // FAILED_PRECONDITION for another layout), adopts `signature` (see
  // ParameterServer::Register) and admits the rank to `members`. A
  // registration of rank 0 that overrules a provisional signature revokes
  // the other ranks and fills `revoked`.
  absl::StatusOr<Registration> Register(int rank,
                                        const ModelSignature& signature,
                                        Membership* members,
                                        Revocation* revoked);

  // Restores a checkpoint before any worker registers (see
  // ParameterServer::Restore).
  absl::Status Restore(const ShardCheckpoint& checkpoint);
  // Replaces the barriers with new ones holding `checkpoint`, an older
  // version of the same model (see ParameterServer::StepBack): every
  // member is revoked (ABORTED) and the old barriers go to `revoked`.
  // ABORTED when the shard's version is below `from` (the request is
  // stale).
  absl::Status StepBack(const ShardCheckpoint& checkpoint, int64_t from,
                        Membership* members, Revocation* revoked);

  // The signature, version and owned barriers, taken together.
  View Current() const;

  // Gives up the step each chunk gathers, answering its pushes `why`.
  void ExpireGathering(const absl::Status& why);

  // See ParameterServer::StopNewSteps and Shutdown.
  void StopNewSteps();
  void Shutdown(const absl::Status& reason);

 private:
  // Builds the barriers for `signature`, unpublished.
  absl::StatusOr<std::unique_ptr<Layout>> BuildLayoutLocked(
      const ModelSignature& signature) const ABSL_EXCLUSIVE_LOCKS_REQUIRED(mu_);
  // Builds and publishes the barriers for `signature`.
  absl::Status ConfigureLocked(const ModelSignature& signature)
      ABSL_EXCLUSIVE_LOCKS_REQUIRED(mu_);
  // FAILED_PRECONDITION when `checkpoint` is another shard's, or of
  // another shard or worker count.
  absl::Status CheckCheckpointPlace(const ShardCheckpoint& checkpoint) const;
  // Restores `checkpoint`'s chunks into `layout`'s barriers.
  static absl::Status RestoreInto(const Layout& layout,
                                  const ShardCheckpoint& checkpoint);
  absl::Status CheckRegistrationLocked(int rank,
                                       const ModelSignature& signature) const
      ABSL_EXCLUSIVE_LOCKS_REQUIRED(mu_);
  // Makes `signature` the job's when there is none yet, or when rank 0
  // brings another one than the provisional one (revoking the others);
  // FAILED_PRECONDITION when it differs otherwise.
  absl::Status AdoptSignatureLocked(int rank, const ModelSignature& signature,
                                    Membership* members, Revocation* revoked)
      ABSL_EXCLUSIVE_LOCKS_REQUIRED(mu_);
  // Sets the job's length after a restore; FAILED_PRECONDITION when
  // `total_steps` ends before the restored version.
  absl::Status ExtendLocked(int64_t total_steps)
      ABSL_EXCLUSIVE_LOCKS_REQUIRED(mu_);

  const ParameterServerOptions options_;
  BarrierCounters* const counters_;  // Not owned.

  // Written under mu_, read without it (the push path).
  std::atomic<const Layout*> layout_{nullptr};
  std::atomic<bool> shutting_down_{false};
  std::atomic<int64_t> step_limit_{std::numeric_limits<int64_t>::max()};

  mutable absl::Mutex mu_;
  std::optional<ModelSignature> signature_ ABSL_GUARDED_BY(mu_);
  // Until rank 0 registers, the signature is provisional and rank 0's wins.
  bool signature_from_rank0_ ABSL_GUARDED_BY(mu_) = false;
  // Restored, and no worker registered since: the first one may set the
  // job's length (Restore).
  bool length_open_ ABSL_GUARDED_BY(mu_) = false;
  // StopNewSteps: registrations are refused.
  bool draining_ ABSL_GUARDED_BY(mu_) = false;
  // Every layout published, the current one last; never freed before this
  // object, as callers may hold pointers into earlier ones (closed).
  std::vector<std::unique_ptr<const Layout>> layouts_ ABSL_GUARDED_BY(mu_);
};

}  // namespace lockstep

#endif  // LOCKSTEP_SERVER_CORE_STEP_BARRIERS_H_
