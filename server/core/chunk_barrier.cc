#include "server/core/chunk_barrier.h"

#include <algorithm>
#include <cstring>
#include <memory>
#include <optional>
#include <utility>
#include <vector>

#include "absl/strings/str_cat.h"
#include "common/base/status_macros.h"
#include "server/core/push_checks.h"

namespace lockstep {

ChunkBarrier::ChunkBarrier(const Chunk& chunk, const SyncPolicy& policy,
                           int num_workers, const OptimizerConfig& optimizer,
                           BarrierCounters* counters, BarrierObserver* observer,
                           SumOrder sum_order, WorkPool* pool, Env* env)
    : chunk_(chunk),
      counters_(counters),
      observer_(observer),
      core_(chunk, optimizer, num_workers,
            /*rank_order=*/sum_order == SumOrder::kRank &&
                policy.mode == SyncMode::kSync && num_workers > 2,
            counters, pool, env),
      rule_(SyncRule::Create(policy, num_workers,
                             /*record_arrivals=*/observer != nullptr, &core_)) {
}

void ChunkBarrier::PublishLocked(
    int64_t version, std::shared_ptr<const std::vector<float>> weights,
    ChunkAnswers* answers) {
  core_.versions().Publish(version, std::move(weights), /*answer_all=*/true,
                           answers);
  published_version_.store(version);
  MaybePinLocked();
}

void ChunkBarrier::MaybePinLocked() {
  const int64_t version = core_.versions().version();
  if (pin_every_ <= 0 || version <= 0 || version % pin_every_ != 0) return;
  if (pinned_.has_value()) {
    if (pinned_->version != version) ++pins_skipped_;
  } else {
    pinned_ = ExportLocked();
  }
}

absl::Status ChunkBarrier::Initialize(absl::string_view fp32_bytes) {
  ChunkAnswers answers;
  {
    absl::MutexLock lock(&mu_);
    if (closed_) return close_status_;
    const ChunkVersions& versions = core_.versions();
    if (versions.initialized()) {
      // Rank 0 sending version 0 again (it lost an answer, or a replacement
      // of it, from the same seed, finishes what it started): the same
      // weights are no change.
      const std::vector<float>& weights = versions.weights();
      if (versions.version() == 0 &&
          fp32_bytes.size() == weights.size() * sizeof(float) &&
          std::memcmp(fp32_bytes.data(), weights.data(), fp32_bytes.size()) ==
              0) {
        return absl::OkStatus();
      }
      return absl::FailedPreconditionError(
          absl::StrCat("chunk ", chunk_.index, " is already initialized",
                       versions.version() == 0 ? " with other weights" : ""));
    }
    auto weights = std::make_shared<std::vector<float>>(chunk_.size);
    std::memcpy(weights->data(), fp32_bytes.data(), fp32_bytes.size());
    core_.Allocate();
    PublishLocked(0, std::move(weights), &answers);
  }
  answers.Run();
  return absl::OkStatus();
}

absl::StatusOr<Admission> ChunkBarrier::AdmitLocked(int rank,
                                                    int64_t step) const {
  if (closed_) return close_status_;
  if (!core_.versions().initialized()) {
    return absl::FailedPreconditionError(
        absl::StrCat("chunk ", chunk_.index,
                     " has no weights yet: rank 0 has not initialized"));
  }
  RETURN_IF_ERROR(CheckStepNotNegative(step));
  return rule_->Admit(rank, step);
}

void ChunkBarrier::Push(int rank, int64_t step, WireDType dtype,
                        absl::Span<const absl::string_view> payload,
                        absl::Time arrival, ChunkCallback done) {
  ChunkAnswers answers;
  PushReport report;  // For the observer, once the lock is released.
  {
    absl::MutexLock lock(&mu_);
    const absl::StatusOr<Admission> admission = AdmitLocked(rank, step);
    absl::Status refused = admission.status();
    if (admission.ok() && *admission == Admission::kAnswerNow) {
      answers.Add(std::move(done), core_.versions().Snapshot());
    } else if (admission.ok()) {
      const int64_t before = core_.versions().version();
      refused = AcceptLocked(rank, step, dtype, payload, arrival, done,
                             &answers, &report);
      published_version_.store(core_.versions().version());
      if (core_.versions().version() != before) MaybePinLocked();
    }
    if (!refused.ok()) {
      answers.Add(std::move(done), RefusePush(counters_, std::move(refused)));
    }
  }
  Report(rank, step, report);
  answers.Run();
}

absl::Status ChunkBarrier::AcceptLocked(
    int rank, int64_t step, WireDType dtype,
    absl::Span<const absl::string_view> payload, absl::Time arrival,
    ChunkCallback& done, ChunkAnswers* answers, PushReport* report) {
  const bool counted = rule_->Counted(rank, step);
  if (!counted) {
    const absl::Status summed =
        core_.Sum(rank, payload, dtype, &report->sum_start, &report->sum_end);
    if (!summed.ok()) return NotFiniteError(chunk_.index, summed);
    report->summed = true;
  }
  const int64_t before = core_.versions().version();
  rule_->Take(rank, step, counted, arrival, std::move(done), answers);
  if (observer_ != nullptr && core_.versions().version() != before) {
    rule_->TakeArrivals(&report->arrivals);
    report->applied = BarrierObserver::Applied{chunk_.index,
                                               before,
                                               core_.apply_start(),
                                               core_.published_at(),
                                               core_.previous_published_at(),
                                               report->arrivals};
  }
  return absl::OkStatus();
}

void ChunkBarrier::Report(int rank, int64_t step,
                          const PushReport& report) const {
  if (observer_ == nullptr) return;
  if (report.summed) {
    observer_->OnAccumulate(chunk_.index, step, rank, report.sum_start,
                            report.sum_end);
  }
  if (report.applied.has_value()) observer_->OnApply(*report.applied);
}

void ChunkBarrier::Pull(int64_t min_version, bool exact, ChunkCallback done) {
  ChunkAnswers answers;
  {
    absl::MutexLock lock(&mu_);
    ChunkVersions& versions = core_.versions();
    const int64_t version = versions.version();
    if (closed_) {
      answers.Add(std::move(done), close_status_);
    } else if (exact && core_.accumulator().holds_previous() &&
               version - 1 == min_version) {
      answers.Add(std::move(done),
                  versions.ExactPrevious(core_.accumulator().values()));
    } else if (min_version > std::max<int64_t>(version, 0) + 1) {
      // A pull waits for the next version at most: a far one would park
      // its call (and memory) until the server stops.
      answers.Add(std::move(done),
                  absl::OutOfRangeError(absl::StrCat(
                      "pull of version ", min_version, " of chunk ",
                      chunk_.index, ", which is at version ", version,
                      ": a pull waits for the next version at most")));
    } else if (!versions.initialized() || version < min_version) {
      versions.AddPullWaiter(min_version, std::move(done));
    } else {
      answers.Add(std::move(done), versions.Snapshot());
    }
  }
  answers.Run();
}

}  // namespace lockstep
