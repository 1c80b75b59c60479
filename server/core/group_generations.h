// The generations of an elastic job's worker group, as one shard sees them.
//
// In an elastic PS job the workers' group (kPsGroupName) re-forms when a
// member joins or leaves, and numbers each formation: its generation.
// GroupGenerations keeps the lowest generation a push may carry (required
// by the coordinator's shard, RequireGeneration) and the newest one seen
// (required, or pushed by a member); a rise of either means the step being
// gathered is given up, which the caller does (ParameterServer).
//
// Thread-safe. Raising a generation takes its lock (a leaf of the server's
// lock order: nothing is called under it); a push's check and its note of
// a generation already seen read atomics, without the lock.
#ifndef LOCKSTEP_SERVER_CORE_GROUP_GENERATIONS_H_
#define LOCKSTEP_SERVER_CORE_GROUP_GENERATIONS_H_

#include <atomic>
#include <cstdint>

#include "absl/status/status.h"
#include "absl/synchronization/mutex.h"
#include "common/model/model_signature.h"
#include "common/rpc/group_membership.h"

namespace lockstep {

class GroupGenerations final {
 public:
  // `num_workers`: the batch shards a step has.
  explicit GroupGenerations(int num_workers) : num_workers_(num_workers) {}

  GroupGenerations(const GroupGenerations&) = delete;
  GroupGenerations& operator=(const GroupGenerations&) = delete;

  // A push's slot: OK without a generation. INVALID_ARGUMENT for a batch
  // shard outside [0, num_workers) or a negative generation;
  // FAILED_PRECONDITION unless `sync` (the job's; null: no job yet) is
  // plain sync without backup workers; ABORTED for a generation older than
  // the one required.
  absl::Status CheckSlot(const PushSlot& slot, const SyncPolicy* sync) const;

  // Requires `generation` from now on. True when it is higher than the one
  // required so far (then the step being gathered is to be given up).
  bool Require(int64_t generation);

  // A member pushed `generation`. True when it is newer than any seen (the
  // group re-formed: the step being gathered is to be given up).
  bool Note(int64_t generation);

  // What a member's leaving means: `regroup`, the generation to require
  // (0: none, this shard requires none), and whether the job is elastic
  // (a generation was seen: the others re-form without the leaver).
  struct Leaving {
    int64_t regroup = 0;
    bool elastic = false;
  };
  Leaving OnLeave() const;

  // The answer of a push whose step is given up because the group
  // re-forms as `generation`.
  static absl::Status ReformingError(int64_t generation);

 private:
  const int num_workers_;
  // Serializes the rises, so that each is reported once, and lets OnLeave
  // read the two generations together.
  mutable absl::Mutex mu_;
  // Written under mu_, read without it. 0: none (not elastic).
  std::atomic<int64_t> min_generation_{0};
  std::atomic<int64_t> seen_generation_{0};
};

}  // namespace lockstep

#endif  // LOCKSTEP_SERVER_CORE_GROUP_GENERATIONS_H_
