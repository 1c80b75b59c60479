#include "worker/data/sharded_sampler.h"

#include <cstdint>
#include <cstdio>
#include <cstdlib>
#include <numeric>
#include <utility>
#include <vector>

#include "absl/status/status.h"
#include "absl/status/statusor.h"
#include "absl/strings/str_format.h"
#include "common/base/random.h"

namespace lockstep {

absl::StatusOr<ShardedSampler> ShardedSampler::Create(int64_t num_examples,
                                                      int num_workers, int rank,
                                                      int batch_size,
                                                      uint64_t seed) {
  if (num_workers < 1 || rank < 0 || rank >= num_workers) {
    return absl::InvalidArgumentError(absl::StrFormat(
        "rank %d is not in [0, num_workers = %d)", rank, num_workers));
  }
  if (batch_size < 1) {
    return absl::InvalidArgumentError(
        absl::StrFormat("batch_size %d is not positive", batch_size));
  }
  // Both factors are below 2^31, so the product fits int64.
  const int64_t global_batch = int64_t{num_workers} * batch_size;
  if (num_examples < global_batch) {
    return absl::InvalidArgumentError(absl::StrFormat(
        "%d examples cannot fill one global batch of %d workers x %d",
        num_examples, num_workers, batch_size));
  }
  ShardedSampler sampler;
  sampler.num_examples_ = num_examples;
  sampler.num_workers_ = num_workers;
  sampler.rank_ = rank;
  sampler.batch_size_ = batch_size;
  sampler.seed_ = seed;
  return sampler;
}

int64_t ShardedSampler::StepsPerEpoch() const {
  return num_examples_ / (int64_t{num_workers_} * batch_size_);
}

std::vector<int64_t> ShardedSampler::BatchIndices(int64_t step, int shard) {
  if (step < 0 || shard < 0 || shard >= num_workers_) {
    // The signature has no room for a status and these can only come from
    // a bug in the caller's step counter or shard plan.
    std::fprintf(stderr,
                 "ShardedSampler::BatchIndices: step %lld, shard %d of %d\n",
                 static_cast<long long>(step), shard, num_workers_);
    std::abort();
  }
  const int64_t steps_per_epoch = StepsPerEpoch();
  const int64_t epoch = step / steps_per_epoch;
  const int64_t step_in_epoch = step % steps_per_epoch;
  // Training walks the steps in order, so one cached epoch avoids rebuilding
  // an N-entry permutation on every step.
  if (epoch != cached_epoch_) {
    cached_permutation_ = EpochPermutation(epoch);
    cached_epoch_ = epoch;
  }
  const int64_t start =
      (step_in_epoch * num_workers_ + shard) * int64_t{batch_size_};
  return std::vector<int64_t>(
      cached_permutation_.begin() + start,
      cached_permutation_.begin() + start + batch_size_);
}

std::vector<int64_t> ShardedSampler::EpochPermutation(int64_t epoch) const {
  std::vector<int64_t> permutation(num_examples_);
  std::iota(permutation.begin(), permutation.end(), int64_t{0});
  // Fisher-Yates from the back, with its own generator per epoch: the order
  // depends on (num_examples, seed, epoch) alone, so every worker and any
  // later restart derive the same one without communicating.
  Random rng(Random::Derive(seed_, static_cast<uint64_t>(epoch)));
  for (int64_t i = num_examples_ - 1; i > 0; --i) {
    const int64_t j =
        static_cast<int64_t>(rng.UniformInt(static_cast<uint64_t>(i) + 1));
    std::swap(permutation[i], permutation[j]);
  }
  return permutation;
}

}  // namespace lockstep
