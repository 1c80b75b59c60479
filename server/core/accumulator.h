// The gradient sum of one chunk: the one-pass check-and-sum of a push (the
// kernels of common/kernels/kernels.h), the holding of early pushes when a
// synchronous step sums in rank order, and the apply of the sum's mean to
// the weights. Between a synchronous step's close and the next step's
// first push the idle sum holds the weights of the version before (for an
// exact pull); that first push then writes over them instead of adding.
//
// Not thread-safe: ChunkBarrier's lock guards it.
#ifndef LOCKSTEP_SERVER_CORE_ACCUMULATOR_H_
#define LOCKSTEP_SERVER_CORE_ACCUMULATOR_H_

#include <cstdint>
#include <optional>
#include <string>
#include <vector>

#include "absl/status/status.h"
#include "absl/strings/string_view.h"
#include "absl/types/span.h"
#include "common/base/work_pool.h"
#include "common/optim/optimizer.h"
#include "common/optim/sum_order.h"
#include "common/wire/wire_codec.h"

namespace lockstep {

class Accumulator {
 public:
  // 256 Ki elements: a block is 1 MiB of fp32, some 100 us of work, far
  // more than waking a helper costs; a smaller chunk (the tutorial MLP's
  // 101,770 values, --chunk_bytes=auto's chunks up to 1 MiB) runs on the
  // calling thread alone.
  static constexpr int64_t kParallelGrain = int64_t{1} << 18;

  // A sum of `size` fp32 values, allocated (as zeros) by Allocate.
  // `rank_order`: sum in ascending rank of `num_workers` (SumOrder::kRank).
  // `pool` (not owned, may be null) splits the sums and the apply in blocks
  // of kParallelGrain.
  Accumulator(int64_t size, int num_workers, bool rank_order, WorkPool* pool);

  // Allocates the sum (zeros) unless it is already; before anything else.
  void Allocate();

  // Checks `rank`'s push for NaN and Inf and sums it, or (in rank order,
  // before a lower rank's) holds a copy of it, then sums the held pushes
  // that now follow the summed ranks without a gap. INVALID_ARGUMENT for a
  // NaN or Inf, with the sum unchanged. Sizes are checked by the caller.
  absl::Status Add(int rank, absl::Span<const absl::string_view> payload,
                   WireDType dtype);
  // At a step's close in rank order: sums what is still held (ranks after
  // one that did not push, with backup workers), in ascending rank.
  void SumHeld();
  // A step given up: forgets its sum (unless nothing was summed yet and it
  // still holds the previous weights) and its held pushes.
  void ForgetStep();
  // Forgets the held pushes (nothing is summed).
  void ForgetHeld();

  // One pass over the chunk: `to` = the optimizer's step `step` from
  // `from` with the sum times `scale` (for a `state` chunk: the sum times
  // `scale` itself). Then the sum holds `from` (`keep_previous`) or zeros.
  void Apply(Optimizer* optimizer, int64_t step, bool state, float scale,
             const float* from, float* to, bool keep_previous);

  // Whether the sum holds the version before's weights (see the top).
  bool holds_previous() const { return holds_previous_; }
  const std::vector<float>& values() const { return sum_; }
  // Frees the sum and the held pushes; the object is not used again.
  void Release();

 private:
  // A push held in rank order: a copy of its payload, checked already.
  struct HeldPush {
    WireDType dtype;
    std::string bytes;
  };
  // Adds (or, holding the previous weights, writes) `payload` into the
  // sum, checking it unless `checked`.
  absl::Status Sum(absl::Span<const absl::string_view> payload, WireDType dtype,
                   bool checked);
  void SumHeldPush(std::optional<HeldPush>& held);

  const int num_workers_;
  const bool rank_order_;
  WorkPool* const pool_;  // Not owned; may be null.
  const int64_t size_;
  std::vector<float> sum_;  // Empty until Allocate.
  bool holds_previous_ = false;
  // rank_order_: the ranks below next_rank_ are summed; a later rank's push
  // that came early waits in held_, by rank.
  std::vector<std::optional<HeldPush>> held_;
  int next_rank_ = 0;
};

}  // namespace lockstep

#endif  // LOCKSTEP_SERVER_CORE_ACCUMULATOR_H_
