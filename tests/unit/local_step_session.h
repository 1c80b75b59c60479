// A StepSession in the test's own process that plays a one-worker
// synchronous job: SGD with `learning_rate` on the gradient it is handed,
// version = step + 1. It fails the steps a test names (once each) and
// recovers from them with the real StepRecovery, so a trainer test sees
// what a real session's rejoin and stop rules produce.
#ifndef LOCKSTEP_TESTS_UNIT_LOCAL_STEP_SESSION_H_
#define LOCKSTEP_TESTS_UNIT_LOCAL_STEP_SESSION_H_

#include <algorithm>
#include <atomic>
#include <map>
#include <utility>
#include <vector>

#include "common/base/status_macros.h"
#include "worker/exchange/step_recovery.h"
#include "worker/exchange/step_session.h"

namespace lockstep {

inline StepSessionOptions LocalOptions(const std::atomic<bool>* signal) {
  StepSessionOptions o;
  o.rejoin_timeout = absl::Seconds(30);
  o.stop_requested = signal;
  return o;
}

class LocalStepSession final : public StepSession {
 public:
  // `signal` is the stop signal StepRecovery sees (a step that fails after
  // it is a stop); `stopping` what Stopping() says (the agreed stop). Not
  // owned; either may be null.
  explicit LocalStepSession(const std::atomic<bool>* signal = nullptr,
                            const std::atomic<bool>* stopping = nullptr,
                            float learning_rate = 0.1f)
      : recovery_(LocalOptions(signal)),
        stopping_(stopping),
        learning_rate_(learning_rate) {}

  absl::StatusOr<StepOutcome> Join(const ModelSignature& signature,
                                   InitialFn initial, absl::Span<float> weights,
                                   absl::Span<float>, absl::Duration) override {
    joined_with = signature;
    initial_ = std::move(initial);
    weights_ = weights;
    gradient_.resize(weights.size());
    ASSIGN_OR_RETURN(StepOutcome joined, JoinOnce());
    RETURN_IF_ERROR(CheckNotPastEnd(signature, joined));
    recovery_.StepSucceeded();
    return joined;
  }

  absl::StatusOr<StepPlan> BeginStep() override {
    StepPlan plan;
    plan.step = next_step_;
    plan.batch_shards = {0};
    plan.gradient = absl::MakeSpan(gradient_);
    return plan;
  }
  void GradientReady(int64_t, int64_t) override {}

  absl::StatusOr<StepOutcome> FinishStep() override {
    const int64_t step = next_step_;
    steps.push_back(step);
    if (auto it = failures.find(step); it != failures.end()) {
      absl::Status failure = it->second;
      failures.erase(it);  // Fails once.
      return recovery_.AfterFailure(
          failure, /*can_rejoin=*/true,
          [this](absl::Duration) { return JoinOnce(); });
    }
    for (size_t i = 0; i < master_.size(); ++i) {
      master_[i] -= learning_rate_ * gradient_[i];
    }
    std::copy(master_.begin(), master_.end(), weights_.begin());
    version_ = step + 1;
    recovery_.StepSucceeded();
    StepOutcome done;
    done.applied = true;
    done.version = done.next_step = next_step_ = version_;
    return done;
  }
  absl::Status AbandonStep() override { return absl::OkStatus(); }
  bool Stopping() const override {
    return stopping_ != nullptr && stopping_->load();
  }
  absl::StatusOr<std::vector<double>> Average(const std::string&,
                                              absl::Span<const double> values,
                                              absl::Duration) override {
    return std::vector<double>(values.begin(), values.end());  // One worker.
  }
  absl::Status Leave(const LeaveNote& note) override {
    ++leaves;
    last_leave = note;
    return absl::OkStatus();
  }
  absl::Status LeaveFromAnyThread() override {
    return Leave(LeaveNote{LeaveReason::kStopped, ""});
  }
  int64_t rejoins() const override { return recovery_.rejoins(); }
  StepTimings step_timings() const override { return StepTimings(); }
  int push_window() const override { return 0; }
  std::vector<int> NextBatchShards() const override { return {0}; }

  int joins = 0;
  int leaves = 0;
  LeaveNote last_leave;       // What the last Leave said.
  int64_t join_version = -1;  // >= 0: what Join says, not the job's version.
  ModelSignature joined_with;
  std::vector<int64_t> steps;  // Every step finished (or failed).
  std::map<int64_t, absl::Status> failures;

 private:
  absl::StatusOr<StepOutcome> JoinOnce() {
    ++joins;
    if (!initialized_) {
      master_ = initial_();
      initialized_ = true;
    }
    std::copy(master_.begin(), master_.end(), weights_.begin());
    StepOutcome joined;
    joined.version = join_version >= 0 ? join_version : version_;
    joined.next_step = next_step_ = joined.version;
    return joined;
  }

  StepRecovery recovery_;
  const std::atomic<bool>* const stopping_;
  const float learning_rate_;
  InitialFn initial_;
  absl::Span<float> weights_;
  std::vector<float> gradient_;
  bool initialized_ = false;
  std::vector<float> master_;
  int64_t version_ = 0;
  int64_t next_step_ = 0;
};

}  // namespace lockstep

#endif  // LOCKSTEP_TESTS_UNIT_LOCAL_STEP_SESSION_H_
