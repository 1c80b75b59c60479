#include "server/core/accumulator.h"

#include <algorithm>
#include <optional>
#include <vector>

#include "absl/strings/str_join.h"
#include "common/base/status_macros.h"
#include "common/kernels/kernels.h"

namespace lockstep {

Accumulator::Accumulator(int64_t size, int num_workers, bool rank_order,
                         WorkPool* pool)
    : num_workers_(num_workers),
      rank_order_(rank_order),
      pool_(pool),
      size_(size) {
  if (rank_order_) held_.resize(num_workers);
}

void Accumulator::Allocate() {
  if (sum_.empty()) sum_.assign(size_, 0.0f);
}

absl::Status Accumulator::Add(int rank,
                              absl::Span<const absl::string_view> payload,
                              WireDType dtype) {
  if (!rank_order_) return Sum(payload, dtype, /*checked=*/false);
  if (rank != next_rank_) {
    // A lower rank is still to come: keep a copy, since the caller releases
    // the payload once this returns; checked now, summed later.
    RETURN_IF_ERROR(CheckFinitePieces(payload, dtype));
    held_[rank] = HeldPush{dtype, absl::StrJoin(payload, "")};
    return absl::OkStatus();
  }
  RETURN_IF_ERROR(Sum(payload, dtype, /*checked=*/false));
  ++next_rank_;
  while (next_rank_ < num_workers_ && held_[next_rank_].has_value()) {
    SumHeldPush(held_[next_rank_]);
    ++next_rank_;
  }
  return absl::OkStatus();
}

absl::Status Accumulator::Sum(absl::Span<const absl::string_view> payload,
                              WireDType dtype, bool checked) {
  // The first push of a step writes over the previous version's weights
  // kept for an exact pull (sizes checked by the caller).
  const bool overwrite = holds_previous_;
  absl::Span<float> sum = absl::MakeSpan(sum_);
  if (checked) {
    AccumulateUncheckedPieces(payload, dtype, sum, overwrite, pool_,
                              kParallelGrain);
  } else {
    RETURN_IF_ERROR(AccumulateCheckedPieces(payload, dtype, sum, overwrite,
                                            pool_, kParallelGrain));
  }
  holds_previous_ = false;
  return absl::OkStatus();
}

void Accumulator::SumHeld() {
  for (std::optional<HeldPush>& held : held_) {
    if (held.has_value()) SumHeldPush(held);
  }
  next_rank_ = 0;
}

void Accumulator::SumHeldPush(std::optional<HeldPush>& held) {
  const absl::string_view bytes = held->bytes;
  Sum(absl::MakeConstSpan(&bytes, 1), held->dtype, /*checked=*/true)
      .IgnoreError();  // Checked when it was held.
  held.reset();
}

void Accumulator::ForgetStep() {
  // Nothing summed yet (every push held, in rank order): the sum still
  // holds the previous version's weights, for an exact pull.
  if (!holds_previous_) std::fill(sum_.begin(), sum_.end(), 0.0f);
  ForgetHeld();
}

void Accumulator::ForgetHeld() {
  for (std::optional<HeldPush>& held : held_) held.reset();
  next_rank_ = 0;
}

void Accumulator::Apply(Optimizer* optimizer, int64_t step, bool state,
                        float scale, const float* from, float* to,
                        bool keep_previous) {
  const kernels::Table& k = kernels::Active();
  float* sum = sum_.data();
  // Block by block, each on whichever thread of the pool takes it: every
  // element is computed on its own, so the bits are those of one pass.
  auto apply = [&](int64_t begin, int64_t end) {
    const int64_t n = end - begin;
    if (state) {
      // Model state (batch-norm moving statistics): the mean of what the
      // workers pushed becomes the new value.
      k.scale(n, scale, sum + begin, to + begin);
    } else {
      // The mean, the copy of the weights and the update in one pass: the
      // bits of scaling the sum, copying and applying.
      optimizer->ApplyMean(step, begin, absl::MakeConstSpan(from + begin, n),
                           absl::MakeSpan(to + begin, n),
                           absl::MakeConstSpan(sum + begin, n), scale);
    }
    if (keep_previous) {
      // Idle until the next step's first push: it keeps this version's
      // weights for an exact pull (in place of the zeroing it replaces).
      std::copy(from + begin, from + end, sum + begin);
    } else {
      std::fill(sum + begin, sum + end, 0.0f);
    }
  };
  const int64_t size = static_cast<int64_t>(sum_.size());
  if (pool_ != nullptr) {
    pool_->ParallelFor(size, kParallelGrain, apply);
  } else {
    apply(0, size);
  }
  holds_previous_ = keep_previous;
}

void Accumulator::Release() {
  std::vector<float>().swap(sum_);
  ForgetHeld();
}

}  // namespace lockstep
