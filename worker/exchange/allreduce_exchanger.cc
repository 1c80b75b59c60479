#include "worker/exchange/allreduce_exchanger.h"

#include <algorithm>
#include <cmath>
#include <cstdio>
#include <utility>

#include "absl/strings/str_cat.h"
#include "absl/time/clock.h"
#include "common/signature_proto.h"
#include "common/status_macros.h"

namespace lockstep {
AllReduceExchanger::AllReduceExchanger(
    AllReduceOptions options, GroupOptions group,
    std::unique_ptr<CoordinatorClient> coordinator, PsClient* server,
    const std::atomic<bool>* stop_requested, std::atomic<bool>* stop_agreed,
    ReducerFactory create)
    : options_(std::move(options)),
      group_(group),
      coordinator_(std::move(coordinator)),
      server_(server),
      stop_requested_(stop_requested),
      stop_agreed_(stop_agreed),
      create_(std::move(create)),
      member_(NewGroupMemberId()) {
  for (int r = 0; r < options_.size; ++r) members_.push_back(r);
  index_ = options_.rank;
}

AllReduceExchanger::~AllReduceExchanger() { StopWatch(); }

absl::Status AllReduceExchanger::Start(
    const ModelSignature& signature,
    const std::function<std::vector<float>()>& initial,
    absl::Span<float> weights) {
  ASSIGN_OR_RETURN(optimizer_, Optimizer::Create(signature.optimizer,
                                                 signature.NumParameters()));
  num_parameters_ = signature.NumParameters();
  // The coordinator refuses a member whose model differs from its group's.
  v1::ModelSignature proto;
  SignatureToProto(signature, &proto);
  signature_ = proto.SerializeAsString();
  // Every rank draws version 0 from the same seed with a generator that
  // gives the same bits everywhere, so nothing needs to be sent.
  const std::vector<float> version0 = initial();
  if (version0.size() != weights.size()) {
    return absl::InternalError(absl::StrCat(
        "initial weights have ", version0.size(), " values, expected ",
        weights.size()));
  }
  std::copy(version0.begin(), version0.end(), weights.begin());
  version_ = 0;
  return absl::OkStatus();
}

absl::StatusOr<CoordinatorClient::Group> AllReduceExchanger::JoinGroup(
    absl::Duration timeout) {
  if (generation_ == 0) {
    std::printf(
        "Waiting for the all-reduce group \"%s\" to form: rank %d of %d, at "
        "the coordinator %s\n",
        options_.group.c_str(), options_.rank, options_.size,
        coordinator_->address().c_str());
    std::fflush(stdout);
  }
  CoordinatorClient::GroupRequest request;
  request.group = options_.group;
  request.member = member_;
  request.rank = options_.rank;
  request.size = options_.size;
  request.version = version_;
  request.min_size = Elastic() ? group_.min_workers : 0;
  request.settle = group_.settle;
  request.signature = signature_;
  // The first Join has no deadline of its own: the rendezvous timeout
  // (--connect_timeout_s) bounds each wait for the group.
  const absl::Duration wait = std::min(timeout, options_.rendezvous_timeout);
  return coordinator_->JoinGroup(request, absl::Now() + wait);
}

absl::StatusOr<int64_t> AllReduceExchanger::Join(
    const ModelSignature& signature,
    const std::function<std::vector<float>()>& initial,
    absl::Span<float> weights, absl::Duration timeout) {
  if (optimizer_ == nullptr)
    RETURN_IF_ERROR(Start(signature, initial, weights));
  // A failed generation's reducer goes first: its connections and service.
  StopWatch();
  reducer_.reset();
  regroup_ = false;
  joiner_seen_ = false;
  if (options_.size == 1) {
    ASSIGN_OR_RETURN(reducer_, create_(options_));
    return version_;
  }
  if (coordinator_ == nullptr) {
    return absl::InternalError("an all-reduce group without a coordinator");
  }
  ASSIGN_OR_RETURN(const CoordinatorClient::Group group, JoinGroup(timeout));
  AllReduceOptions generation = options_;
  generation.group = absl::StrCat(options_.group, "/g", group.generation);
  generation.rank = group.index;
  generation.size = static_cast<int>(group.members.size());
  ASSIGN_OR_RETURN(reducer_, create_(generation));
  index_ = group.index;
  members_ = group.members;
  if (group.state_needed) {
    RETURN_IF_ERROR(ShareState(group.source_index == index_, weights));
    if (group.source_index != index_ && version_ != group.version) {
      std::printf("Rank %d took version %lld from rank %d\n", options_.rank,
                  static_cast<long long>(group.version),
                  group.members[group.source_index]);
      std::fflush(stdout);
    }
  }
  const int size = static_cast<int>(members_.size());
  if (generation_ > 0 || size < options_.size) {
    std::printf(
        "Rank %d is in the group at version %lld (generation %lld, %d "
        "of %d ranks)\n",
        options_.rank, static_cast<long long>(group.version),
        static_cast<long long>(group.generation), size, options_.size);
    std::fflush(stdout);
  }
  version_ = group.version;
  generation_ = group.generation;
  if (Elastic() && index_ == 0 && size < options_.size) StartWatch();
  return version_;
}

std::vector<int> AllReduceExchanger::BatchShards(int rank) const {
  std::vector<int> shards;
  const int w = static_cast<int>(members_.size());
  for (int shard = index_; shard < options_.size; shard += w) {
    shards.push_back(shard);
  }
  return shards;
}

void AllReduceExchanger::StartWatch() {
  {
    absl::MutexLock lock(&watch_mu_);
    watch_stop_ = false;
  }
  coordinator_->ResetWatch();
  watch_ = std::thread([this, generation = generation_] { Watch(generation); });
}

void AllReduceExchanger::StopWatch() {
  if (!watch_.joinable()) return;
  {
    absl::MutexLock lock(&watch_mu_);
    watch_stop_ = true;
  }
  coordinator_->CancelWatch();
  watch_.join();
}

void AllReduceExchanger::Watch(int64_t generation) {
  while (true) {
    absl::StatusOr<int> waiting = coordinator_->WatchGroup(
        options_.group, generation, absl::Now() + group_.watch_poll);
    // Someone waits to join, or the coordinator forgot the group (it
    // restarted): re-forming lets the one in, or tells the new coordinator
    // of us.
    if (waiting.ok() ||
        waiting.status().code() == absl::StatusCode::kInvalidArgument) {
      joiner_seen_ = true;
      return;
    }
    if (waiting.status().code() == absl::StatusCode::kCancelled) return;
    // Away or slow: ask again, after a pause unless it just timed out.
    const absl::Duration pause =
        waiting.status().code() == absl::StatusCode::kDeadlineExceeded
            ? absl::ZeroDuration()
            : absl::Seconds(1);
    absl::MutexLock lock(&watch_mu_);
    if (watch_mu_.AwaitWithTimeout(absl::Condition(&watch_stop_), pause)) {
      return;
    }
  }
}

absl::Status AllReduceExchanger::ShareState(bool send,
                                            absl::Span<float> weights) {
  std::vector<std::pair<std::string, absl::Span<float>>> slots =
      optimizer_->Slots();
  size_t total = weights.size();
  for (const auto& slot : slots) total += slot.second.size();
  state_buffer_.resize(total);
  // -0.0 + x is x, bits and all, for every x (+0.0 would turn -0.0 into
  // +0.0): the sum is the sender's values.
  if (!send) std::fill(state_buffer_.begin(), state_buffer_.end(), -0.0f);
  float* at = state_buffer_.data();
  if (send) {
    at = std::copy(weights.begin(), weights.end(), at);
    for (const auto& slot : slots) {
      at = std::copy(slot.second.begin(), slot.second.end(), at);
    }
  }
  RETURN_IF_ERROR(reducer_->AllReduceSum(absl::MakeSpan(state_buffer_)));
  if (send) return absl::OkStatus();
  const float* from = state_buffer_.data();
  std::copy(from, from + weights.size(), weights.begin());
  from += weights.size();
  for (const auto& slot : slots) {
    std::copy(from, from + slot.second.size(), slot.second.begin());
    from += slot.second.size();
  }
  return absl::OkStatus();
}

absl::StatusOr<int64_t> AllReduceExchanger::Step(int64_t step,
                                                 absl::Span<float> gradient,
                                                 absl::Span<float> weights,
                                                 const ComputeFn& compute,
                                                 BatchStats* stats) {
  if (reducer_ == nullptr) {
    return absl::FailedPreconditionError("all-reduce step before Join");
  }
  ASSIGN_OR_RETURN(*stats, compute(nullptr));
  if (gradient.size() != weights.size() + 2) {
    return absl::InternalError(
        absl::StrCat("all-reduce gradient vector has ", gradient.size(),
                     " values, expected ", weights.size() + 2,
                     " (the weights, the stop and the joiners' flags)"));
  }
  // Read as late as possible: a stop asked for after this goes with the
  // next step.
  stop_sent_ = stop_requested_ != nullptr && stop_requested_->load();
  gradient[weights.size()] = stop_sent_ ? 1.0f : 0.0f;
  gradient[weights.size() + 1] = joiner_seen_ ? 1.0f : 0.0f;
  // A failed sum changes nothing here: the weights and the optimizer's
  // state stay at version_ for the re-formed group.
  RETURN_IF_ERROR(reducer_->AllReduceSum(gradient));
  // The same scaling as a parameter server's: the sum times 1/W, in the
  // optimizer's pass, W being the step's shards (--workers) whoever
  // computed them.
  const float scale = 1.0f / static_cast<float>(options_.size);
  const absl::Span<float> parameters = weights.subspan(0, num_parameters_);
  optimizer_->ApplyMean(step, 0, parameters, parameters,
                        gradient.subspan(0, num_parameters_), scale);
  // The state (batch-norm statistics) becomes the workers' mean.
  for (size_t i = static_cast<size_t>(num_parameters_); i < weights.size();
       ++i) {
    weights[i] = gradient[i] * scale;
  }
  version_ = step + 1;
  AfterStep(gradient[weights.size()], gradient[weights.size() + 1]);
  return version_;
}

void AllReduceExchanger::AfterStep(float stops, float joiners) {
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
    } else if (stop_agreed_ != nullptr) {
      stop_agreed_->store(true);
    }
    return;
  }
  if (joiners > 0) regroup_ = true;
}

absl::Status AllReduceExchanger::Leave() {
  StopWatch();
  if (server_ == nullptr) return absl::OkStatus();
  const bool stopped = stop_agreed_ != nullptr && stop_agreed_->load();
  if (!stopped && index_ == 0) {
    // The job is done: the ranks missing from the group that finished it
    // (an elastic job's) will not come back for it, so that the server
    // need not wait for them.
    for (int r = 0; r < options_.size; ++r) {
      if (std::find(members_.begin(), members_.end(), r) == members_.end()) {
        RETURN_IF_ERROR(server_->LeaveUnregistered(r));
      }
    }
  }
  return server_->LeaveUnregistered(options_.rank);
}

}  // namespace lockstep
