#include "server/core/chunk_core.h"

#include <cstdio>
#include <cstdlib>
#include <memory>
#include <utility>
#include <vector>

namespace lockstep {

ChunkCore::ChunkCore(const Chunk& chunk, const OptimizerConfig& optimizer,
                     int num_workers, bool rank_order,
                     BarrierCounters* counters, WorkPool* pool, Env* env)
    : chunk_(chunk),
      counters_(counters),
      env_(env),
      optimizer_config_(optimizer),
      accumulator_(chunk.size, num_workers, rank_order, pool),
      versions_(chunk.index) {}

void ChunkCore::Allocate() {
  if (optimizer_ != nullptr) return;
  absl::StatusOr<std::unique_ptr<Optimizer>> optimizer =
      Optimizer::Create(optimizer_config_, chunk_.size);
  if (!optimizer.ok()) {
    // Validated with the signature when the chunk was laid out.
    std::fprintf(stderr, "lockstep: chunk %d: %s\n", chunk_.index,
                 optimizer.status().ToString().c_str());
    std::abort();
  }
  optimizer_ = *std::move(optimizer);
  accumulator_.Allocate();
}

absl::Status ChunkCore::Sum(int rank,
                            absl::Span<const absl::string_view> payload,
                            WireDType dtype, absl::Time* start,
                            absl::Time* end) {
  const bool held_previous = accumulator_.holds_previous();
  // Inside the lock: the check's and the sum's own time, not the wait for
  // the lock behind other pushes' sums and the apply.
  *start = env_->Now();
  const absl::Status summed = accumulator_.Add(rank, payload, dtype);
  *end = env_->Now();
  counters_->accumulate_ns.fetch_add(absl::ToInt64Nanoseconds(*end - *start),
                                     std::memory_order_relaxed);
  if (held_previous && !accumulator_.holds_previous()) {
    versions_.ForgetPrevious();  // Written over.
  }
  if (!summed.ok()) return summed;
  counters_->pushes_accepted.fetch_add(1, std::memory_order_relaxed);
  counters_->bytes_received.fetch_add(PiecesSize(payload),
                                      std::memory_order_relaxed);
  return absl::OkStatus();
}

void ChunkCore::ApplyAndPublish(float scale, bool keep_previous,
                                ChunkAnswers* answers) {
  const absl::Time start = env_->Now();
  apply_start_ = start;
  // The published snapshot is the master copy: the next version is made in
  // a new buffer and published in turn, so a chunk holds one copy of its
  // weights (plus, briefly, the ones replies still send).
  auto next = std::make_shared<std::vector<float>>(chunk_.size);
  accumulator_.Apply(optimizer_.get(), versions_.version(), chunk_.state, scale,
                     versions_.weights().data(), next->data(), keep_previous);
  // A new previous version: the exact pulls' snapshot is of the old one.
  if (keep_previous) versions_.ForgetPrevious();
  counters_->chunk_steps.fetch_add(1, std::memory_order_relaxed);
  previous_published_at_ = published_at_;
  versions_.Publish(versions_.version() + 1, std::move(next),
                    /*answer_all=*/false, answers);
  published_at_ = env_->Now();
  counters_->apply_ns.fetch_add(absl::ToInt64Nanoseconds(published_at_ - start),
                                std::memory_order_relaxed);
}

void ChunkCore::Release() {
  accumulator_.Release();
  optimizer_.reset();
  versions_.Release();
}

}  // namespace lockstep
