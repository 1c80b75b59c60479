// The three sync rules (see sync_rule.h): SyncStepRule, AsyncRule and
// SspRule, and SyncRule::Create, which chooses among them.
#include <algorithm>
#include <memory>
#include <optional>
#include <utility>
#include <vector>

#include "absl/strings/str_cat.h"
#include "server/core/sync_rule.h"

namespace lockstep {
namespace {

// kSync: a step closes once W - b distinct ranks have pushed it.
class SyncStepRule final : public SyncRule {
 public:
  SyncStepRule(const SyncPolicy& policy, int num_workers, bool record_arrivals,
               ChunkCore* core)
      : num_workers_(num_workers),
        backup_workers_(policy.backup_workers),
        record_arrivals_(record_arrivals),
        core_(core),
        pushed_(num_workers, false),
        pushed_previous_(num_workers, false),
        arrivals_(num_workers, absl::InfinitePast()) {}

  absl::StatusOr<Admission> Admit(int rank, int64_t step) override {
    const int64_t version = core_->versions().version();
    if (step == version) return Admission::kSum;
    if (step == version - 1 && pushed_previous_[rank]) {
      // A re-sent push of the step just applied (its answer was lost): it
      // was counted then, so it gets the same answer now.
      return Admission::kAnswerNow;
    }
    if (step < version && backup_workers_ > 0) {
      // Beaten by the backups: dropped, and the straggler catches up.
      core_->counters()->pushes_dropped_late.fetch_add(
          1, std::memory_order_relaxed);
      return Admission::kAnswerNow;
    }
    return absl::FailedPreconditionError(absl::StrCat(
        "push for step ", step, " but chunk ", core_->chunk().index,
        " is at version ", version, "; expected step ", version));
  }

  bool Counted(int rank, int64_t /*step*/) const override {
    return pushed_[rank];
  }

  void Take(int rank, int64_t /*step*/, bool counted, absl::Time arrival,
            ChunkCallback done, ChunkAnswers* answers) override {
    push_waiters_.push_back(std::move(done));
    if (counted) return;  // Counted already: wait with the rest.
    if (record_arrivals_) arrivals_[rank] = arrival;
    pushed_[rank] = true;
    if (num_pushed_ == 0) {
      first_push_ = last_push_ = arrival;
    } else {
      // Pushes may take the lock in another order than they arrived.
      first_push_ = std::min(first_push_, arrival);
      last_push_ = std::max(last_push_, arrival);
    }
    if (++num_pushed_ < num_workers_ - backup_workers_) return;
    ApplyStep(answers);
  }

  void TakeArrivals(std::vector<absl::Time>* arrivals) override {
    if (!record_arrivals_) return;
    arrivals->swap(arrivals_);
    arrivals_.assign(num_workers_, absl::InfinitePast());
  }

  std::optional<ChunkGathering> Pending() const override {
    if (num_pushed_ == 0) return std::nullopt;
    ChunkGathering g;
    g.step = core_->versions().version();
    g.since = first_push_;
    for (int r = 0; r < num_workers_; ++r) {
      if (!pushed_[r]) g.missing.push_back(r);
    }
    return g;
  }

  bool Expire(int64_t step, const absl::Status& status,
              ChunkAnswers* answers) override {
    if (num_pushed_ == 0 || core_->versions().version() != step) return false;
    core_->accumulator().ForgetStep();
    std::fill(pushed_.begin(), pushed_.end(), false);
    std::fill(arrivals_.begin(), arrivals_.end(), absl::InfinitePast());
    num_pushed_ = 0;
    Close(status, answers);
    return true;
  }

  bool HasPushed(int rank) const override { return pushed_[rank]; }

  void Close(const absl::Status& status, ChunkAnswers* answers) override {
    for (ChunkCallback& cb : push_waiters_) answers->Add(std::move(cb), status);
    push_waiters_.clear();
  }

 private:
  // The step has all it needs: applies it and answers its pushes.
  void ApplyStep(ChunkAnswers* answers) {
    // First push's arrival to the last one's (not to the end of its sum).
    core_->counters()->barrier_wait_ns.fetch_add(
        absl::ToInt64Nanoseconds(last_push_ - first_push_),
        std::memory_order_relaxed);
    core_->accumulator().SumHeld();
    const float scale = 1.0f / static_cast<float>(num_pushed_);
    pushed_previous_.swap(pushed_);
    std::fill(pushed_.begin(), pushed_.end(), false);
    num_pushed_ = 0;
    core_->ApplyAndPublish(scale, /*keep_previous=*/true, answers);
    for (ChunkCallback& cb : push_waiters_) {
      answers->Add(std::move(cb), core_->versions().Snapshot());
    }
    push_waiters_.clear();
  }

  const int num_workers_;
  const int backup_workers_;
  const bool record_arrivals_;
  ChunkCore* const core_;  // Not owned.
  // Who pushed the step being gathered, and the step before.
  std::vector<bool> pushed_;
  std::vector<bool> pushed_previous_;
  int num_pushed_ = 0;
  // The earliest and latest arrival of the step's counted pushes.
  absl::Time first_push_;
  absl::Time last_push_;
  std::vector<ChunkCallback> push_waiters_;
  // record_arrivals_: the step's arrivals by rank.
  std::vector<absl::Time> arrivals_;
};

// kAsync: every push is applied on its own and answered at once.
class AsyncRule : public SyncRule {
 public:
  AsyncRule(int num_workers, ChunkCore* core)
      : core_(core), clock_(num_workers, 0) {}

  absl::StatusOr<Admission> Admit(int /*rank*/, int64_t /*step*/) override {
    return Admission::kSum;
  }

  bool Counted(int rank, int64_t step) const override {
    return step + 1 == clock_[rank];
  }

  void Take(int rank, int64_t step, bool counted, absl::Time /*arrival*/,
            ChunkCallback done, ChunkAnswers* answers) override {
    ApplyOnce(rank, step, counted, answers);
    answers->Add(std::move(done), core_->versions().Snapshot());
  }

  std::optional<ChunkGathering> Pending() const override {
    return std::nullopt;
  }
  bool Expire(int64_t /*step*/, const absl::Status& /*status*/,
              ChunkAnswers* /*answers*/) override {
    return false;
  }
  bool HasPushed(int /*rank*/) const override { return false; }
  void Close(const absl::Status& /*status*/,
             ChunkAnswers* /*answers*/) override {}

 protected:
  // Applies the push unless it was `counted` (a re-sent push of the rank's
  // last step, not applied twice), and advances the rank's clock.
  void ApplyOnce(int rank, int64_t step, bool counted, ChunkAnswers* answers) {
    if (!counted) {
      core_->ApplyAndPublish(/*scale=*/1.0f, /*keep_previous=*/false, answers);
    }
    clock_[rank] = std::max(clock_[rank], step + 1);
  }
  ChunkCore* const core_;  // Not owned.
  // One past the latest step each rank has pushed.
  std::vector<int64_t> clock_;
};

// kSsp: a push's answer waits until the slowest is at most k steps behind.
// A rank evicted after the step timeout is left out of the slowest until
// its clock catches up with the others' again.
class SspRule final : public AsyncRule {
 public:
  SspRule(const SyncPolicy& policy, int num_workers, ChunkCore* core)
      : AsyncRule(num_workers, core),
        staleness_(policy.staleness),
        excused_(num_workers, false) {}

  void Take(int rank, int64_t step, bool counted, absl::Time /*arrival*/,
            ChunkCallback done, ChunkAnswers* answers) override {
    ApplyOnce(rank, step, counted, answers);
    if (excused_[rank]) {
      // Back from an eviction: waited for again once it is no longer
      // behind the others (or is the only one left), not before, so
      // coming back does not hold them as if it had never left.
      const std::optional<int64_t> others = Slowest();
      if (!others.has_value() || clock_[rank] >= *others) {
        excused_[rank] = false;
      }
    }
    // The worker may start step + 1 once the slowest has pushed
    // step + 1 - k.
    waiters_.push_back(
        Waiter{step + 1 - staleness_, core_->env()->Now(), std::move(done)});
    Release(answers);
  }

  std::optional<ChunkGathering> Pending() const override {
    const std::optional<int64_t> slowest = Slowest();
    if (waiters_.empty() || !slowest.has_value()) return std::nullopt;
    ChunkGathering g;
    g.step = *slowest;  // The slowest ranks' next step.
    g.since = waiters_.front().since;
    for (const Waiter& w : waiters_) g.since = std::min(g.since, w.since);
    for (int r = 0; r < static_cast<int>(clock_.size()); ++r) {
      if (!excused_[r] && clock_[r] == g.step) g.missing.push_back(r);
    }
    return g;
  }

  // The held pushes were applied: only their answers are given up.
  bool Expire(int64_t step, const absl::Status& status,
              ChunkAnswers* answers) override {
    if (waiters_.empty() || Slowest() != step) return false;
    Close(status, answers);
    return true;
  }

  bool Excuse(absl::Span<const int> ranks, ChunkAnswers* answers) override {
    const std::optional<int64_t> slowest = Slowest();
    if (!slowest.has_value()) return false;
    bool any = false;
    for (int r : ranks) {
      if (r < 0 || r >= static_cast<int>(clock_.size())) continue;
      if (excused_[r] || clock_[r] != *slowest) continue;
      excused_[r] = true;
      any = true;
    }
    if (any) Release(answers);
    return any;
  }

  bool HasPushed(int rank) const override {
    const std::optional<int64_t> slowest = Slowest();
    return slowest.has_value() && clock_[rank] > *slowest;
  }

  void Close(const absl::Status& status, ChunkAnswers* answers) override {
    for (Waiter& w : waiters_) answers->Add(std::move(w.done), status);
    waiters_.clear();
  }

 private:
  // A push held for the slowest: answered once the slowest has pushed
  // `until`; `since` is when it came.
  struct Waiter {
    int64_t until;
    absl::Time since;
    ChunkCallback done;
  };

  // The next step of the slowest rank not left out (nullopt: all are).
  std::optional<int64_t> Slowest() const {
    std::optional<int64_t> slowest;
    for (int r = 0; r < static_cast<int>(clock_.size()); ++r) {
      if (excused_[r]) continue;
      if (!slowest.has_value() || clock_[r] < *slowest) slowest = clock_[r];
    }
    return slowest;
  }

  // Answers the held pushes the slowest no longer holds back.
  void Release(ChunkAnswers* answers) {
    const std::optional<int64_t> slowest = Slowest();
    auto ready = std::stable_partition(
        waiters_.begin(), waiters_.end(), [&slowest](const Waiter& w) {
          return slowest.has_value() && w.until > *slowest;
        });
    for (auto it = ready; it != waiters_.end(); ++it) {
      answers->Add(std::move(it->done), core_->versions().Snapshot());
    }
    waiters_.erase(ready, waiters_.end());
  }

  const int64_t staleness_;
  // Ranks evicted after the step timeout, not waited for until they have
  // caught up with the others.
  std::vector<bool> excused_;
  std::vector<Waiter> waiters_;
};

}  // namespace

std::unique_ptr<SyncRule> SyncRule::Create(const SyncPolicy& policy,
                                           int num_workers,
                                           bool record_arrivals,
                                           ChunkCore* core) {
  if (policy.mode == SyncMode::kSync) {
    return std::make_unique<SyncStepRule>(policy, num_workers, record_arrivals,
                                          core);
  }
  if (policy.mode == SyncMode::kAsync) {
    return std::make_unique<AsyncRule>(num_workers, core);
  }
  // kSsp (a job's signature names no other mode: ParameterServer refuses
  // it).
  return std::make_unique<SspRule>(policy, num_workers, core);
}

}  // namespace lockstep
