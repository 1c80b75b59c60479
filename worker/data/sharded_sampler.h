// Which examples each worker trains on at each global step.
//
// Every epoch the whole training set is shuffled with a permutation that
// depends only on (num_examples, seed, epoch) -- never on the worker count or
// rank -- so every worker computes the same order. Global step s of epoch e
// consumes the W*B consecutive positions [s*W*B, (s+1)*W*B) of that epoch's
// permutation; worker r takes the B positions starting at s*W*B + r*B. The
// shards are therefore disjoint, one global step consumes W*B distinct
// examples, and W workers with batch B see exactly the examples one worker
// with batch W*B sees (whoever computes each of the W shards: see the
// two-argument BatchIndices). An epoch has floor(N / (W*B)) steps; the
// remainder is dropped (a different remainder each epoch, as the order
// changes).
//
// Immutable after construction, except for a one-epoch permutation cache:
// externally synchronized.
#ifndef LOCKSTEP_WORKER_DATA_SHARDED_SAMPLER_H_
#define LOCKSTEP_WORKER_DATA_SHARDED_SAMPLER_H_

#include <cstdint>
#include <vector>

#include "absl/status/statusor.h"

namespace lockstep {

class ShardedSampler final {
 public:
  // INVALID_ARGUMENT unless 0 <= rank < num_workers, batch_size >= 1 and
  // num_examples >= num_workers * batch_size.
  static absl::StatusOr<ShardedSampler> Create(int64_t num_examples,
                                               int num_workers, int rank,
                                               int batch_size, uint64_t seed);

  int64_t StepsPerEpoch() const;

  // Indices of this worker's batch at global step `step` (counting across
  // epochs from 0): batch_size entries.
  std::vector<int64_t> BatchIndices(int64_t step) {
    return BatchIndices(step, rank_);
  }
  // The same for shard `shard` of the step, 0 <= shard < num_workers: the
  // batch rank `shard` takes. A job going on with fewer workers than
  // num_workers has some compute several shards of each step, so that the
  // step's examples stay those of a full job.
  std::vector<int64_t> BatchIndices(int64_t step, int shard);

  // The permutation of [0, num_examples) used in `epoch`.
  std::vector<int64_t> EpochPermutation(int64_t epoch) const;

 private:
  ShardedSampler() = default;
  int64_t num_examples_ = 0;
  int num_workers_ = 1;
  int rank_ = 0;
  int batch_size_ = 1;
  uint64_t seed_ = 0;
  int64_t cached_epoch_ = -1;
  std::vector<int64_t> cached_permutation_;
};

}  // namespace lockstep

#endif  // LOCKSTEP_WORKER_DATA_SHARDED_SAMPLER_H_
