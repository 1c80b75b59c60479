// What every sync rule of one chunk acts on: the chunk's optimizer, its
// gradient sum (Accumulator) and its versions (ChunkVersions), and the two
// steps they share: a push checked and summed, and the sum's mean applied
// and published as the next version (with the counters and the times the
// observer reads).
//
// Not thread-safe: ChunkBarrier's lock guards it.
#ifndef LOCKSTEP_SERVER_CORE_CHUNK_CORE_H_
#define LOCKSTEP_SERVER_CORE_CHUNK_CORE_H_

#include <cstdint>
#include <memory>

#include "absl/status/status.h"
#include "absl/strings/string_view.h"
#include "absl/time/time.h"
#include "absl/types/span.h"
#include "common/base/env.h"
#include "common/base/work_pool.h"
#include "common/model/chunk_plan.h"
#include "common/optim/optimizer.h"
#include "common/wire/wire_codec.h"
#include "server/core/accumulator.h"
#include "server/core/barrier_counters.h"
#include "server/core/chunk_versions.h"

namespace lockstep {

class ChunkCore {
 public:
  // `counters`, `pool` (may be null) and `env` are not owned and outlive
  // the core. `optimizer` was validated (Optimizer::Create accepts it).
  ChunkCore(const Chunk& chunk, const OptimizerConfig& optimizer,
            int num_workers, bool rank_order, BarrierCounters* counters,
            WorkPool* pool, Env* env);

  // Allocates the sum and the optimizer with its state, unless they are
  // already: when the chunk's weights come (initialized or restored), not
  // when a worker registers, so that naming a model costs no memory until
  // its weights have been sent.
  void Allocate();

  // Checks and sums `rank`'s push (Accumulator::Add), counting it and the
  // time it took; the exact pulls' snapshot goes once the sum is written.
  // On `start` and `end`: when the check and sum began and ended.
  absl::Status Sum(int rank, absl::Span<const absl::string_view> payload,
                   WireDType dtype, absl::Time* start, absl::Time* end);

  // Applies the sum times `scale` (1 / the pushes summed) as step
  // version(), publishes version() + 1 and answers the pulls it satisfies.
  // `keep_previous` (sync mode): the idle sum then holds the weights of
  // the version before, for an exact pull.
  void ApplyAndPublish(float scale, bool keep_previous, ChunkAnswers* answers);

  // Frees the weights, the sum and the optimizer's state (a closed chunk).
  void Release();

  const Chunk& chunk() const { return chunk_; }
  Env* env() const { return env_; }
  BarrierCounters* counters() const { return counters_; }
  // Null before Allocate.
  Optimizer* optimizer() const { return optimizer_.get(); }
  Accumulator& accumulator() { return accumulator_; }
  ChunkVersions& versions() { return versions_; }
  const ChunkVersions& versions() const { return versions_; }

  // For the observer: when the latest version's apply began, when it was
  // published, and when the one before was (InfinitePast: none since
  // version 0 was set or restored).
  absl::Time apply_start() const { return apply_start_; }
  absl::Time published_at() const { return published_at_; }
  absl::Time previous_published_at() const { return previous_published_at_; }

 private:
  const Chunk chunk_;
  BarrierCounters* const counters_;  // Not owned.
  Env* const env_;                   // Not owned.
  const OptimizerConfig optimizer_config_;
  std::unique_ptr<Optimizer> optimizer_;  // Null until Allocate.
  Accumulator accumulator_;
  ChunkVersions versions_;
  absl::Time apply_start_;
  absl::Time published_at_ = absl::InfinitePast();
  absl::Time previous_published_at_ = absl::InfinitePast();
};

}  // namespace lockstep

#endif  // LOCKSTEP_SERVER_CORE_CHUNK_CORE_H_
