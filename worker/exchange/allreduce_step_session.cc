#include "worker/exchange/allreduce_step_session.h"

#include <algorithm>
#include <cmath>
#include <cstdio>
#include <utility>

#include "absl/strings/str_cat.h"
#include "absl/time/clock.h"
#include "common/base/status_macros.h"
#include "common/model/signature_proto.h"
#include "common/wire/wire_codec.h"
#include "worker/exchange/ps_step_session.h"

namespace lockstep {
namespace {

// After the gradient and state in the summed vector: how many ranks were
// asked to stop, and whether a joiner waits.
constexpr size_t kStopSlot = 0;
constexpr size_t kJoinerSlot = 1;
constexpr size_t kControlSlots = 2;

}  // namespace

AllReduceStepSession::AllReduceStepSession(
    const StepSessionOptions& options, std::unique_ptr<PsClient> server,
    std::unique_ptr<CoordinatorClient> coordinator)
    : reducer_options_(options.reducer),
      group_(options.group),
      server_(std::move(server)),
      coordinator_(std::move(coordinator)),
      create_(options.create_reducer),
      recovery_(options),
      member_(NewGroupMemberId()) {
  for (int r = 0; r < reducer_options_.size; ++r) members_.push_back(r);
  index_ = reducer_options_.rank;
}

AllReduceStepSession::~AllReduceStepSession() {
  watch_.Stop();
  contact_.reset();
}

absl::Status AllReduceStepSession::Start() {
  ASSIGN_OR_RETURN(optimizer_, Optimizer::Create(signature_.optimizer,
                                                 signature_.NumParameters()));
  num_parameters_ = signature_.NumParameters();
  // The coordinator refuses a member whose model differs from its group's.
  v1::ModelSignature proto;
  SignatureToProto(signature_, &proto);
  signature_proto_ = proto.SerializeAsString();
  // Every rank draws version 0 from the same seed with a generator that
  // gives the same bits everywhere, so nothing needs to be sent.
  const std::vector<float> version0 = initial_();
  if (version0.size() != weights_.size()) {
    return absl::InternalError(
        absl::StrCat("initial weights have ", version0.size(),
                     " values, expected ", weights_.size()));
  }
  std::copy(version0.begin(), version0.end(), weights_.begin());
  version_ = 0;
  return absl::OkStatus();
}

absl::StatusOr<GroupView> AllReduceStepSession::JoinGroup(
    absl::Duration timeout) {
  if (generation_ == 0) {
    std::printf(
        "Waiting for the all-reduce group \"%s\" to form: rank %d of %d, at "
        "the coordinator %s\n",
        reducer_options_.group.c_str(), reducer_options_.rank,
        reducer_options_.size, coordinator_->address().c_str());
    std::fflush(stdout);
  }
  GroupRequest request;
  request.group = reducer_options_.group;
  request.member = member_;
  request.rank = reducer_options_.rank;
  request.size = reducer_options_.size;
  request.version = version_;
  request.min_size = Elastic() ? group_.min_workers : 0;
  request.settle = group_.settle;
  request.signature = signature_proto_;
  // An elastic group of fewer than every rank forms only with a majority
  // of those alive, so that it never runs as two (docs/faults.md).
  request.quorum = Elastic();
  // The first Join has no deadline of its own: the rendezvous timeout
  // (--connect_timeout_s) bounds each wait for the group.
  const absl::Duration wait =
      std::min(timeout, reducer_options_.rendezvous_timeout);
  return coordinator_->JoinGroup(request, absl::Now() + wait);
}

absl::StatusOr<StepOutcome> AllReduceStepSession::Join(
    const ModelSignature& signature, InitialFn initial,
    absl::Span<float> weights, absl::Span<float> gradient,
    absl::Duration timeout) {
  if (in_step_) return absl::FailedPreconditionError("Join during a step");
  RETURN_IF_ERROR(CheckSessionBuffers(signature, weights, gradient));
  signature_ = signature;
  initial_ = std::move(initial);
  weights_ = weights;
  lent_gradient_ = gradient;
  sum_.assign(weights.size() + kControlSlots, 0.0f);
  if (coordinator_ != nullptr && contact_ == nullptr) {
    contact_ = std::make_unique<ContactThread>(
        coordinator_.get(), absl::StrCat(reducer_options_.group, "/contact"),
        group_.contact_every, reducer_options_.rank);
  }
  RETURN_IF_ERROR(Start());
  ASSIGN_OR_RETURN(StepOutcome joined, JoinOnce(timeout));
  RETURN_IF_ERROR(CheckNotPastEnd(signature_, joined));
  recovery_.StepSucceeded();  // The rejoin deadline counts from here.
  clock_.Restart(absl::Now());
  return joined;
}

absl::StatusOr<StepOutcome> AllReduceStepSession::JoinOnce(
    absl::Duration timeout) {
  // A failed generation's reducer goes first: its connections and service.
  watch_.Stop();
  reducer_.reset();
  regroup_ = false;
  joiner_seen_ = false;
  StepOutcome joined;
  if (reducer_options_.size == 1) {
    ASSIGN_OR_RETURN(reducer_, create_(reducer_options_));
    joined.version = joined.next_step = version_;
    return joined;
  }
  if (coordinator_ == nullptr) {
    return absl::InternalError("an all-reduce group without a coordinator");
  }
  ASSIGN_OR_RETURN(const GroupView group, JoinGroup(timeout));
  AllReduceOptions generation = reducer_options_;
  generation.group = GenerationGroup(reducer_options_.group, group.generation);
  generation.rank = group.index;
  generation.size = static_cast<int>(group.members.size());
  ASSIGN_OR_RETURN(reducer_, create_(generation));
  index_ = group.index;
  members_ = group.members;
  if (group.state_needed) {
    RETURN_IF_ERROR(ShareState(group.source_index == index_));
    if (group.source_index != index_ && version_ != group.version) {
      std::printf("Rank %d took version %lld from rank %d\n",
                  reducer_options_.rank, static_cast<long long>(group.version),
                  group.members[group.source_index]);
      std::fflush(stdout);
    }
  }
  const int size = static_cast<int>(members_.size());
  if (generation_ > 0 || size < reducer_options_.size) {
    std::printf(
        "Rank %d is in the group at version %lld (generation %lld, %d "
        "of %d ranks)\n",
        reducer_options_.rank, static_cast<long long>(group.version),
        static_cast<long long>(group.generation), size, reducer_options_.size);
    std::fflush(stdout);
  }
  version_ = group.version;
  generation_ = group.generation;
  // Every elastic member watches: for joiners, and to count as alive.
  if (Elastic()) StartWatch();
  joined.version = joined.next_step = version_;
  return joined;
}

std::vector<int> AllReduceStepSession::NextBatchShards() const {
  std::vector<int> shards;
  const int w = static_cast<int>(members_.size());
  if (w == 0) return shards;
  for (int shard = index_; shard < reducer_options_.size; shard += w) {
    shards.push_back(shard);
  }
  return shards;
}

void AllReduceStepSession::StartWatch() {
  watch_.Start(reducer_options_.group, generation_, reducer_options_.rank,
               group_.watch_poll, [this] { joiner_seen_ = true; });
}

absl::StatusOr<StepPlan> AllReduceStepSession::BeginStep() {
  if (reducer_ == nullptr) {
    return absl::FailedPreconditionError("all-reduce step before Join");
  }
  if (in_step_) {
    return absl::FailedPreconditionError(
        "a step is under way; finish or abandon it first");
  }
  StepPlan plan;
  plan.step = version_;
  plan.batch_shards = NextBatchShards();
  plan.sum_shards_locally = true;
  plan.streams = false;
  // A member that computes absent ranks' shards too takes longer for it:
  // such a step says nothing of the rank's own speed.
  report_step_ = plan.batch_shards.size() == 1;
  plan.gradient = !lent_gradient_.empty()
                      ? lent_gradient_
                      : absl::MakeSpan(sum_).first(weights_.size());
  in_step_ = true;
  return plan;
}

absl::Status AllReduceStepSession::Reduce() {
  const size_t n = weights_.size();
  if (!lent_gradient_.empty()) {
    std::copy(lent_gradient_.begin(), lent_gradient_.end(), sum_.begin());
  }
  // Read as late as possible: a stop asked for after this goes with the
  // next step.
  stop_sent_ = recovery_.StopRequested();
  sum_[n + kStopSlot] = stop_sent_ ? 1.0f : 0.0f;
  sum_[n + kJoinerSlot] = joiner_seen_ ? 1.0f : 0.0f;
  // A failed sum changes nothing here: the weights and the optimizer's
  // state stay at version_ for the re-formed group.
  RETURN_IF_ERROR(reducer_->AllReduceSum(absl::MakeSpan(sum_)));
  // A NaN or Inf in the sum (from any rank's gradient, or an overflow) is
  // refused as a parameter server refuses such a push: nothing is applied,
  // the weights stay at version_, and the job ends (INVALID_ARGUMENT, exit
  // 2). Every rank holds the same sum, so every rank refuses the same step.
  if (absl::Status finite = CheckFiniteEncoded(
          absl::string_view(reinterpret_cast<const char*>(sum_.data()),
                            n * sizeof(float)),
          WireDType::kFloat32);
      !finite.ok()) {
    return absl::InvalidArgumentError(absl::StrCat(
        "the summed gradient of step ", version_, " is not finite (",
        finite.message(), "); nothing applied, the weights stay at version ",
        version_));
  }
  // The same scaling as a parameter server's: the sum times 1/W, in the
  // optimizer's pass, W being the step's shards (--workers) whoever
  // computed them.
  const float scale = 1.0f / static_cast<float>(reducer_options_.size);
  const absl::Span<float> parameters = weights_.subspan(0, num_parameters_);
  optimizer_->ApplyMean(version_, 0, parameters, parameters,
                        absl::MakeSpan(sum_).subspan(0, num_parameters_),
                        scale);
  // The state (batch-norm statistics) becomes the workers' mean.
  for (size_t i = static_cast<size_t>(num_parameters_); i < n; ++i) {
    weights_[i] = sum_[i] * scale;
  }
  ++version_;
  AfterStep(sum_[n + kStopSlot], sum_[n + kJoinerSlot]);
  return absl::OkStatus();
}

absl::StatusOr<StepOutcome> AllReduceStepSession::FinishStep() {
  if (!in_step_) return absl::FailedPreconditionError("no step begun");
  in_step_ = false;
  // The step's time counts to the sum's start; a rejoin's to none.
  auto join = [this](absl::Duration timeout) {
    absl::StatusOr<StepOutcome> joined = JoinOnce(timeout);
    clock_.Restart(absl::Now());
    return joined;
  };
  clock_.Finishing(absl::Now());
  if (absl::Status reduced = Reduce(); !reduced.ok()) {
    return recovery_.AfterFailure(reduced,
                                  /*can_rejoin=*/reducer_options_.size > 1,
                                  join);
  }
  recovery_.StepSucceeded();
  // The collective is the step's wait (no pushes: push is 0).
  const StepReport report = clock_.Finished(version_ - 1, absl::Now());
  if (contact_ != nullptr && report_step_) contact_->Report(report);
  StepOutcome done;
  done.version = done.next_step = version_;
  if (regroup_ && !agreed_stop_ &&
      (signature_.total_steps == 0 || version_ < signature_.total_steps)) {
    // The group changes at this step boundary (a worker joins or leaves):
    // join again, as after a failed step, and go on from there.
    ASSIGN_OR_RETURN(
        done, recovery_.AfterFailure(
                  absl::AbortedError(
                      "a worker joins or leaves the all-reduce group at this "
                      "step"),
                  /*can_rejoin=*/true, join));
  }
  done.applied = true;
  return done;
}

absl::Status AllReduceStepSession::AbandonStep() {
  // Nothing was sent: the weights are still the step's. The next step's
  // report counts from now, not from the abandoned one's start.
  in_step_ = false;
  clock_.Restart(absl::Now());
  return absl::OkStatus();
}

void AllReduceStepSession::AfterStep(float stops, float joiners) {
  if (stops > 0) {
    // Some rank was asked to stop. In an elastic job as many may leave as
    // leave min_workers behind, and those re-form; otherwise every rank
    // stops after this same step, so that none waits for the others in a
    // step they will not take.
    const int left = static_cast<int>(members_.size()) -
                     static_cast<int>(std::lround(stops));
    const bool others_go_on = Elastic() && left >= group_.min_workers;
    if (others_go_on && !stop_sent_) {
      regroup_ = true;
    } else {
      agreed_stop_ = true;
    }
    return;
  }
  if (joiners > 0) regroup_ = true;
}

absl::Status AllReduceStepSession::ShareState(bool send) {
  std::vector<std::pair<std::string, absl::Span<float>>> slots =
      optimizer_->Slots();
  size_t total = weights_.size();
  for (const auto& slot : slots) total += slot.second.size();
  state_buffer_.resize(total);
  // -0.0 + x is x, bits and all, for every x (+0.0 would turn -0.0 into
  // +0.0): the sum is the sender's values.
  if (!send) std::fill(state_buffer_.begin(), state_buffer_.end(), -0.0f);
  float* at = state_buffer_.data();
  if (send) {
    at = std::copy(weights_.begin(), weights_.end(), at);
    for (const auto& slot : slots) {
      at = std::copy(slot.second.begin(), slot.second.end(), at);
    }
  }
  RETURN_IF_ERROR(reducer_->AllReduceSum(absl::MakeSpan(state_buffer_)));
  if (send) return absl::OkStatus();
  const float* from = state_buffer_.data();
  std::copy(from, from + weights_.size(), weights_.begin());
  from += weights_.size();
  for (const auto& slot : slots) {
    std::copy(from, from + slot.second.size(), slot.second.begin());
    from += slot.second.size();
  }
  return absl::OkStatus();
}

absl::StatusOr<std::vector<double>> AllReduceStepSession::Average(
    const std::string&, absl::Span<const double> values, absl::Duration) {
  if (reducer_ == nullptr) {
    return absl::FailedPreconditionError("average: not in a job yet");
  }
  std::vector<float> sum(values.begin(), values.end());
  RETURN_IF_ERROR(reducer_->AllReduceSum(absl::MakeSpan(sum)));
  std::vector<double> mean(sum.begin(), sum.end());
  for (double& v : mean) v /= static_cast<double>(members_.size());
  return mean;
}

absl::Status AllReduceStepSession::Leave(const LeaveNote& note) {
  watch_.Stop();
  if (contact_ != nullptr) {
    contact_->Flush(absl::Milliseconds(500));
    contact_.reset();
  }
  if (Elastic() && coordinator_ != nullptr) {
    // The others need not wait out the coordinator's grace for this rank
    // before they re-form (quorum): a courtesy, like the Leave below.
    coordinator_
        ->LeaveGroup(reducer_options_.group, reducer_options_.rank,
                     absl::Now() + absl::Milliseconds(500))
        .IgnoreError();
  }
  if (server_ == nullptr) return absl::OkStatus();
  if (!agreed_stop_ && index_ == 0) {
    // The job is done: the ranks missing from the group that finished it
    // (an elastic job's) will not come back for it.
    LeaveForAbsentRanks(
        server_.get(), members_, reducer_options_.size,
        absl::StrCat("lockstep_worker ", reducer_options_.rank));
  }
  return server_->LeaveUnregistered(reducer_options_.rank, note);
}

absl::Status AllReduceStepSession::LeaveFromAnyThread() {
  if (server_ == nullptr) return absl::OkStatus();
  return server_->LeaveUnregistered(reducer_options_.rank,
                                    LeaveNote{LeaveReason::kStopped, ""});
}

}  // namespace lockstep
