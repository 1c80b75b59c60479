#include "server/core/chunk_barrier.h"

#include <algorithm>
#include <cstring>
#include <optional>
#include <vector>

#include "absl/strings/str_cat.h"
#include "absl/strings/str_join.h"
#include "common/kernels.h"
#include "common/status_macros.h"

namespace lockstep {

std::shared_ptr<const std::string> EncodedWeights::Get(
    WireDType dtype, const std::vector<float>& values) {
  absl::MutexLock lock(&mu_);
  std::weak_ptr<const std::string>& slot =
      dtype == WireDType::kBfloat16 ? bf16_ : fp16_;
  if (std::shared_ptr<const std::string> shared = slot.lock()) return shared;
  auto encoded = std::make_shared<std::string>();
  EncodeTensor(values, dtype, encoded.get());
  slot = encoded;
  return encoded;
}

ChunkBarrier::ChunkBarrier(const Chunk& chunk, const SyncPolicy& policy,
                           int num_workers,
                           std::unique_ptr<Optimizer> optimizer,
                           BarrierCounters* counters, BarrierObserver* observer,
                           SumOrder sum_order, WorkPool* pool, Env* env)
    : chunk_(chunk),
      policy_(policy),
      num_workers_(num_workers),
      rank_order_(sum_order == SumOrder::kRank &&
                  policy.mode == SyncMode::kSync && num_workers > 2),
      counters_(counters),
      observer_(observer),
      pool_(pool),
      env_(env) {
  absl::MutexLock lock(&mu_);
  optimizer_ = std::move(optimizer);
  accumulator_.assign(chunk.size, 0.0f);
  pushed_.assign(num_workers, false);
  pushed_previous_.assign(num_workers, false);
  clock_.assign(num_workers, 0);
  arrivals_.assign(num_workers, absl::InfinitePast());
  if (rank_order_) held_.resize(num_workers);
}

absl::Status ChunkBarrier::Initialize(absl::string_view fp32_bytes) {
  Answers answers;
  {
    absl::MutexLock lock(&mu_);
    if (closed_) return close_status_;
    if (initialized_) {
      // Rank 0 sending version 0 again (it lost an answer, or a replacement
      // of it, from the same seed, finishes what it started): the same
      // weights are no change.
      if (version_ == 0 &&
          fp32_bytes.size() == published_->size() * sizeof(float) &&
          std::memcmp(fp32_bytes.data(), published_->data(),
                      fp32_bytes.size()) == 0) {
        return absl::OkStatus();
      }
      return absl::FailedPreconditionError(
          absl::StrCat("chunk ", chunk_.index, " is already initialized",
                       version_ == 0 ? " with other weights" : ""));
    }
    auto weights = std::make_shared<std::vector<float>>(chunk_.size);
    std::memcpy(weights->data(), fp32_bytes.data(), fp32_bytes.size());
    initialized_ = true;
    version_ = 0;
    PublishLocked(std::move(weights));
    for (auto& [min_version, cb] : pull_waiters_) {
      answers.Add(std::move(cb), SnapshotLocked());
    }
    pull_waiters_.clear();
  }
  answers.Run();
  return absl::OkStatus();
}

void ChunkBarrier::Push(int rank, int64_t step, WireDType dtype,
                        absl::Span<const absl::string_view> payload,
                        absl::Time arrival, ChunkCallback done) {
  Answers answers;
  PushReport report;  // For the observer, once the lock is released.
  {
    absl::MutexLock lock(&mu_);
    auto refuse = [&](absl::Status status) {
      counters_->CountRefused(status.code());
      answers.Add(std::move(done), std::move(status));
    };
    if (closed_) {
      refuse(close_status_);
    } else if (!initialized_) {
      refuse(absl::FailedPreconditionError(
          absl::StrCat("chunk ", chunk_.index,
                       " has no weights yet: rank 0 has not initialized")));
    } else if (step < 0) {
      refuse(absl::InvalidArgumentError(
          absl::StrCat("push for negative step ", step)));
    } else if (policy_.mode == SyncMode::kSync && step < version_) {
      if (step == version_ - 1 && pushed_previous_[rank]) {
        // A re-sent push of the step just applied (its answer was lost): it
        // was counted then, so it gets the same answer now.
        answers.Add(std::move(done), SnapshotLocked());
      } else if (policy_.backup_workers > 0) {
        // Beaten by the backups: dropped, and the straggler catches up.
        counters_->pushes_dropped_late.fetch_add(1, std::memory_order_relaxed);
        answers.Add(std::move(done), SnapshotLocked());
      } else {
        refuse(absl::FailedPreconditionError(absl::StrCat(
            "push for step ", step, " but chunk ", chunk_.index,
            " is at version ", version_, "; expected step ", version_)));
      }
    } else if (policy_.mode == SyncMode::kSync && step > version_) {
      refuse(absl::FailedPreconditionError(absl::StrCat(
          "push for step ", step, " but chunk ", chunk_.index,
          " is at version ", version_, "; expected step ", version_)));
    } else {
      AcceptLocked(rank, step, dtype, payload, arrival, std::move(done),
                   &answers, &report);
    }
  }
  if (observer_ != nullptr) {
    if (report.summed) {
      observer_->OnAccumulate(chunk_.index, step, rank, report.sum_start,
                              report.sum_end);
    }
    if (report.applied.has_value()) observer_->OnApply(*report.applied);
  }
  answers.Run();
}

void ChunkBarrier::AcceptLocked(int rank, int64_t step, WireDType dtype,
                                absl::Span<const absl::string_view> payload,
                                absl::Time arrival, ChunkCallback done,
                                Answers* answers, PushReport* report) {
  // Counted already: in sync mode a rank's second push of the step being
  // gathered; in async and SSP a re-sent push of the rank's last step (its
  // answer was lost or held past the worker's deadline, and it registered
  // again), which must not be applied twice.
  const bool counted = policy_.mode == SyncMode::kSync
                           ? pushed_[rank]
                           : step + 1 == clock_[rank];
  if (!counted) {
    // Inside the lock: the check's and the sum's own time, not the wait for
    // the lock behind other pushes' sums and the apply.
    const absl::Time start = env_->Now();
    const absl::Status summed =
        rank_order_ ? SumInRankOrderLocked(rank, payload, dtype)
                    : SumLocked(payload, dtype, /*checked=*/false);
    const absl::Time end = env_->Now();
    counters_->accumulate_ns.fetch_add(absl::ToInt64Nanoseconds(end - start),
                                       std::memory_order_relaxed);
    if (!summed.ok()) {
      counters_->CountRefused(absl::StatusCode::kInvalidArgument);
      answers->Add(std::move(done),
                   absl::InvalidArgumentError(absl::StrCat(
                       "chunk ", chunk_.index, ": ", summed.message())));
      return;
    }
    counters_->pushes_accepted.fetch_add(1, std::memory_order_relaxed);
    counters_->bytes_received.fetch_add(PiecesSize(payload),
                                        std::memory_order_relaxed);
    report->summed = true;
    report->sum_start = start;
    report->sum_end = end;
  }
  const int64_t before = version_;
  if (policy_.mode == SyncMode::kSync) {
    if (observer_ != nullptr && !pushed_[rank]) arrivals_[rank] = arrival;
    PushSync(rank, step, arrival, std::move(done), answers);
  } else {
    PushAsync(rank, step, counted, std::move(done), answers);
  }
  if (observer_ != nullptr && version_ != before) {
    if (policy_.mode == SyncMode::kSync) {
      report->arrivals.swap(arrivals_);
      arrivals_.assign(num_workers_, absl::InfinitePast());
    }
    report->applied = BarrierObserver::Applied{
        chunk_.index,           before,          apply_start_, published_at_,
        previous_published_at_, report->arrivals};
  }
}

void ChunkBarrier::PushSync(int rank, int64_t step, absl::Time arrival,
                            ChunkCallback done, Answers* answers) {
  push_waiters_.push_back(std::move(done));
  if (pushed_[rank]) return;  // Counted already: wait with the rest.
  pushed_[rank] = true;
  if (num_pushed_ == 0) {
    first_push_ = last_push_ = arrival;
  } else {
    // Pushes may take the lock in another order than they arrived.
    first_push_ = std::min(first_push_, arrival);
    last_push_ = std::max(last_push_, arrival);
  }
  const int needed = num_workers_ - policy_.backup_workers;
  if (++num_pushed_ < needed) return;
  // First push's arrival to the last one's (not to the end of its sum).
  counters_->barrier_wait_ns.fetch_add(
      absl::ToInt64Nanoseconds(last_push_ - first_push_),
      std::memory_order_relaxed);
  if (rank_order_) SumHeldLocked();
  const float scale = 1.0f / static_cast<float>(num_pushed_);
  pushed_previous_.swap(pushed_);
  std::fill(pushed_.begin(), pushed_.end(), false);
  num_pushed_ = 0;
  ApplyAndPublishLocked(scale, answers);
  for (ChunkCallback& cb : push_waiters_) {
    answers->Add(std::move(cb), SnapshotLocked());
  }
  push_waiters_.clear();
}

absl::Status ChunkBarrier::SumLocked(
    absl::Span<const absl::string_view> payload, WireDType dtype,
    bool checked) {
  // The first push of a step writes over the previous version's weights
  // kept for an exact pull (sizes checked by the caller).
  const bool overwrite = accumulator_holds_previous_;
  absl::Span<float> sum = absl::MakeSpan(accumulator_);
  if (checked) {
    AccumulateUncheckedPieces(payload, dtype, sum, overwrite, pool_,
                              kParallelGrain);
  } else {
    RETURN_IF_ERROR(AccumulateCheckedPieces(payload, dtype, sum, overwrite,
                                            pool_, kParallelGrain));
  }
  if (overwrite) {
    accumulator_holds_previous_ = false;
    ForgetPreviousLocked();
  }
  return absl::OkStatus();
}

absl::Status ChunkBarrier::SumInRankOrderLocked(
    int rank, absl::Span<const absl::string_view> payload, WireDType dtype) {
  if (rank != next_rank_) {
    // A lower rank is still to come: keep a copy, since the caller releases
    // the payload once this returns; checked now, summed later.
    RETURN_IF_ERROR(CheckFinitePieces(payload, dtype));
    held_[rank] = HeldPush{dtype, absl::StrJoin(payload, "")};
    return absl::OkStatus();
  }
  RETURN_IF_ERROR(SumLocked(payload, dtype, /*checked=*/false));
  ++next_rank_;
  while (next_rank_ < num_workers_ && held_[next_rank_].has_value()) {
    SumHeldPushLocked(held_[next_rank_]);
    ++next_rank_;
  }
  return absl::OkStatus();
}

void ChunkBarrier::SumHeldLocked() {
  for (std::optional<HeldPush>& held : held_) {
    if (held.has_value()) SumHeldPushLocked(held);
  }
  next_rank_ = 0;
}

void ChunkBarrier::SumHeldPushLocked(std::optional<HeldPush>& held) {
  const absl::string_view bytes = held->bytes;
  SumLocked(absl::MakeConstSpan(&bytes, 1), held->dtype, /*checked=*/true)
      .IgnoreError();  // Checked when it was held.
  held.reset();
}

void ChunkBarrier::ForgetPreviousLocked() {
  previous_.reset();
  previous_encoded_.reset();
}

void ChunkBarrier::ForgetHeldLocked() {
  for (std::optional<HeldPush>& held : held_) held.reset();
  next_rank_ = 0;
}

void ChunkBarrier::PushAsync(int rank, int64_t step, bool counted,
                             ChunkCallback done, Answers* answers) {
  if (!counted) ApplyAndPublishLocked(/*scale=*/1.0f, answers);
  clock_[rank] = std::max(clock_[rank], step + 1);
  if (policy_.mode == SyncMode::kAsync) {
    answers->Add(std::move(done), SnapshotLocked());
    return;
  }
  // kSsp: the worker may start step + 1 once the slowest has pushed
  // step + 1 - k.
  ssp_waiters_.push_back(
      SspWaiter{step + 1 - policy_.staleness, env_->Now(), std::move(done)});
  const int64_t slowest = MinClockLocked();
  auto ready = std::stable_partition(
      ssp_waiters_.begin(), ssp_waiters_.end(),
      [slowest](const SspWaiter& w) { return w.until > slowest; });
  for (auto it = ready; it != ssp_waiters_.end(); ++it) {
    answers->Add(std::move(it->done), SnapshotLocked());
  }
  ssp_waiters_.erase(ready, ssp_waiters_.end());
}

void ChunkBarrier::ApplyAndPublishLocked(float scale, Answers* answers) {
  const absl::Time start = env_->Now();
  apply_start_ = start;
  // The published snapshot is the master copy: the next version is made in
  // a new buffer and published in turn, so a chunk holds one copy of its
  // weights (plus, briefly, the ones replies still send).
  auto next = std::make_shared<std::vector<float>>(chunk_.size);
  const bool sync = policy_.mode == SyncMode::kSync;
  const kernels::Table& k = kernels::Active();
  const float* from = published_->data();
  float* to = next->data();
  float* sum = accumulator_.data();
  // Block by block, each on whichever thread of the pool takes it: every
  // element is computed on its own, so the bits are those of one pass.
  auto apply = [&](int64_t begin, int64_t end) {
    const int64_t n = end - begin;
    if (chunk_.state) {
      // Model state (batch-norm moving statistics): the mean of what the
      // workers pushed becomes the new value.
      k.scale(n, scale, sum + begin, to + begin);
    } else {
      // The mean, the copy of the weights and the update in one pass: the
      // bits of scaling the sum, copying and applying.
      optimizer_->ApplyMean(version_, begin,
                            absl::MakeConstSpan(from + begin, n),
                            absl::MakeSpan(to + begin, n),
                            absl::MakeConstSpan(sum + begin, n), scale);
    }
    if (sync) {
      // Idle until the next step's first push: it keeps this version's
      // weights for an exact pull (in place of the zeroing it replaces).
      std::copy(from + begin, from + end, sum + begin);
    } else {
      std::fill(sum + begin, sum + end, 0.0f);
    }
  };
  if (pool_ != nullptr) {
    pool_->ParallelFor(chunk_.size, kParallelGrain, apply);
  } else {
    apply(0, chunk_.size);
  }
  if (sync) {
    accumulator_holds_previous_ = true;
    ForgetPreviousLocked();
  }
  ++version_;
  PublishLocked(std::move(next));
  counters_->chunk_steps.fetch_add(1, std::memory_order_relaxed);
  previous_published_at_ = published_at_;
  published_at_ = env_->Now();
  counters_->apply_ns.fetch_add(absl::ToInt64Nanoseconds(published_at_ - start),
                                std::memory_order_relaxed);
  auto ready = std::stable_partition(
      pull_waiters_.begin(), pull_waiters_.end(),
      [this](const auto& p) ABSL_EXCLUSIVE_LOCKS_REQUIRED(mu_) {
        return p.first > version_;
      });
  for (auto it = ready; it != pull_waiters_.end(); ++it) {
    answers->Add(std::move(it->second), SnapshotLocked());
  }
  pull_waiters_.erase(ready, pull_waiters_.end());
}

void ChunkBarrier::PublishLocked(
    std::shared_ptr<const std::vector<float>> weights) {
  published_ = std::move(weights);
  encoded_ = std::make_shared<EncodedWeights>();
  published_version_.store(version_);
}

int64_t ChunkBarrier::MinClockLocked() const {
  return *std::min_element(clock_.begin(), clock_.end());
}

void ChunkBarrier::Pull(int64_t min_version, bool exact, ChunkCallback done) {
  Answers answers;
  {
    absl::MutexLock lock(&mu_);
    if (closed_) {
      answers.Add(std::move(done), close_status_);
    } else if (exact && accumulator_holds_previous_ &&
               version_ - 1 == min_version) {
      // One copy for every exact pull until the accumulator is written
      // (not one per call: a caller could pile them up).
      if (previous_ == nullptr) {
        previous_ = std::make_shared<const std::vector<float>>(accumulator_);
        previous_encoded_ = std::make_shared<EncodedWeights>();
      }
      answers.Add(std::move(done), ChunkSnapshot{chunk_.index, min_version,
                                                 previous_, previous_encoded_});
    } else if (min_version > std::max<int64_t>(version_, 0) + 1) {
      // A pull waits for the next version at most: a far one would park
      // its call (and memory) until the server stops.
      answers.Add(std::move(done),
                  absl::OutOfRangeError(absl::StrCat(
                      "pull of version ", min_version, " of chunk ",
                      chunk_.index, ", which is at version ", version_,
                      ": a pull waits for the next version at most")));
    } else if (!initialized_ || version_ < min_version) {
      pull_waiters_.emplace_back(min_version, std::move(done));
    } else {
      answers.Add(std::move(done), SnapshotLocked());
    }
  }
  answers.Run();
}

}  // namespace lockstep
