// PsClient: its steps (PushStep, push_step.h, one at a time, and
// ShardPushes for an elastic job's several batch shards), what they push
// with, and their timings, over the shards' transports it owns; joining,
// Initialize, Pull and Leave are ShardMembership's (shard_membership.h).
#include "worker/exchange/ps/ps_client.h"

#include <algorithm>
#include <atomic>
#include <utility>

#include "absl/strings/str_cat.h"
#include "common/base/status_macros.h"
#include "worker/exchange/ps/failover_shard_transport.h"
#include "worker/exchange/ps/grpc_shard_transport.h"
#include "worker/exchange/ps/push_step.h"
#include "worker/exchange/ps/shard_membership.h"

namespace lockstep {
namespace {

std::vector<ShardTransport*> Pointers(
    const std::vector<std::unique_ptr<ShardTransport>>& shards) {
  std::vector<ShardTransport*> pointers;
  for (const std::unique_ptr<ShardTransport>& shard : shards) {
    pointers.push_back(shard.get());
  }
  return pointers;
}

}  // namespace

class PsClient::Impl {
 public:
  Impl(const PsClientOptions& options,
       std::vector<std::unique_ptr<ShardTransport>> shards)
      : options_(options),
        shards_(std::move(shards)),
        membership_(options_, Pointers(shards_)) {
    push_target_.shards = Pointers(shards_);
    push_target_.wire_dtype = options_.wire_dtype;
    push_target_.timings = &timings_;
    push_target_.decode_ns = &decode_ns_;
    push_target_.encoded = &encoded_;
    push_target_.env = options_.env;
    if (options_.push_thread) {
      pusher_ = std::make_unique<PushThread>();
      push_target_.pusher = pusher_.get();
    }
  }

  ps_client_internal::ShardMembership& membership() { return membership_; }

  absl::StatusOr<RegisterResult> Register(int rank,
                                          const ModelSignature& signature,
                                          absl::Duration timeout) {
    ASSIGN_OR_RETURN(RegisterResult result,
                     membership_.Register(rank, signature, timeout));
    Registered(rank, signature);
    return result;
  }

  absl::Status BeginStep(int64_t step, absl::Span<const float> gradient,
                         absl::Span<float> weights) {
    RETURN_IF_ERROR(membership_.CheckRegistered(gradient.size()));
    RETURN_IF_ERROR(membership_.CheckRegistered(weights.size()));
    if (step_ != nullptr) {
      return absl::FailedPreconditionError(
          absl::StrCat("step ", step_->step(), " is still in flight"));
    }
    step_ = std::make_unique<ps_client_internal::PushStep>(
        push_target_, step, gradient, weights,
        options_.env->Now() + options_.step_timeout);
    return absl::OkStatus();
  }

  void GradientReady(int64_t begin, int64_t end) {
    if (step_ != nullptr) step_->GradientReady(begin, end);
  }

  absl::StatusOr<int64_t> FinishStep() {
    if (step_ == nullptr) {
      return absl::FailedPreconditionError("no step in flight");
    }
    absl::StatusOr<int64_t> result = step_->Finish();
    ++timings_.steps;
    step_.reset();
    return result;
  }

  void AbandonStep() { step_.reset(); }

  void SetPushSlot(const PushSlot& slot) { push_target_.slot = slot; }
  void SetStepReport(const StepReport& report) {
    push_target_.slot.report = report;
  }

  absl::StatusOr<int64_t> PushShards(int64_t step,
                                     absl::Span<const PushSlot> slots,
                                     absl::Span<const float> gradients,
                                     absl::Span<float> weights) {
    RETURN_IF_ERROR(membership_.CheckRegistered(weights.size()));
    if (step_ != nullptr) {
      return absl::FailedPreconditionError(
          absl::StrCat("step ", step_->step(), " is still in flight"));
    }
    absl::StatusOr<int64_t> result =
        shard_pushes_.Run(push_target_, step, slots, gradients, weights,
                          options_.env->Now() + options_.step_timeout);
    ++timings_.steps;
    return result;
  }

  absl::StatusOr<int64_t> PushPull(int64_t step,
                                   absl::Span<const float> gradient,
                                   absl::Span<float> weights) {
    RETURN_IF_ERROR(BeginStep(step, gradient, weights));
    GradientReady(0, membership_.plan()->num_elements());
    return FinishStep();
  }

  int push_window() const { return push_target_.window; }

  StepTimings step_timings() const {
    StepTimings timings = timings_;
    auto seconds = [](const std::atomic<int64_t>& ns) {
      return static_cast<double>(ns.load(std::memory_order_relaxed)) * 1e-9;
    };
    timings.decode_seconds = seconds(decode_ns_);
    return timings;
  }

 private:
  // Registered as `rank` for `signature`, chunked by the membership's plan:
  // what the steps push with.
  void Registered(int rank, const ModelSignature& signature) {
    const ChunkPlan& plan = *membership_.plan();
    push_target_.plan = &plan;
    push_target_.window = ResolvePushWindow(
        options_.max_pushes_in_flight, signature.num_workers,
        std::min(plan.elements_per_chunk(), plan.num_elements()),
        options_.wire_dtype);
    encoded_.resize(plan.num_chunks());
    push_target_.rank = rank;
    push_target_.incarnations = membership_.incarnations();
    push_target_.synchronous = signature.sync.mode == SyncMode::kSync;
  }

  const PsClientOptions options_;
  const std::vector<std::unique_ptr<ShardTransport>> shards_;  // By shard.
  ps_client_internal::ShardMembership membership_;
  // Client-side time for benchmarks: the training thread (and the push
  // thread, which every step waits for before it ends) write timings_, so
  // read it between steps; decoding, on the transports' threads, adds to
  // decode_ns_.
  StepTimings timings_;
  std::atomic<int64_t> decode_ns_{0};
  // What a step pushes with (filled at construction and Register), the
  // thread it pushes from (options_.push_thread), the encoded payloads it
  // sends, by chunk, and the step in flight, destroyed first: an abandoned
  // step waits for its pushes.
  std::unique_ptr<PushThread> pusher_;
  ps_client_internal::PushTarget push_target_;
  std::vector<std::string> encoded_;
  std::unique_ptr<ps_client_internal::PushStep> step_;
  ps_client_internal::ShardPushes shard_pushes_;
};

absl::StatusOr<std::unique_ptr<PsClient>> PsClient::Create(
    const PsClientOptions& options) {
  if (options.servers.empty()) {
    return absl::InvalidArgumentError("no parameter-server address given");
  }
  ASSIGN_OR_RETURN(
      std::vector<std::unique_ptr<ShardTransport>> shards,
      MakeGrpcShardTransports(options.servers, options.tls,
                              options.max_message_bytes, options.cancel));
  if (!options.standby_servers.empty()) {
    if (options.standby_servers.size() != options.servers.size()) {
      return absl::InvalidArgumentError(absl::StrCat(
          "one standby per shard: ", options.servers.size(),
          " server(s) but ", options.standby_servers.size(), " standby(s)"));
    }
    ASSIGN_OR_RETURN(std::vector<std::unique_ptr<ShardTransport>> standbys,
                     MakeGrpcShardTransports(options.standby_servers,
                                             options.tls,
                                             options.max_message_bytes,
                                             options.cancel));
    for (size_t s = 0; s < shards.size(); ++s) {
      std::vector<std::unique_ptr<ShardTransport>> replicas;
      replicas.push_back(std::move(shards[s]));
      replicas.push_back(std::move(standbys[s]));
      shards[s] = std::make_unique<FailoverShardTransport>(std::move(replicas));
    }
  }
  return CreateOver(options, std::move(shards));
}

absl::StatusOr<std::unique_ptr<PsClient>> PsClient::CreateOver(
    const PsClientOptions& options,
    std::vector<std::unique_ptr<ShardTransport>> shards) {
  if (shards.empty()) {
    return absl::InvalidArgumentError("no parameter-server shard given");
  }
  return std::unique_ptr<PsClient>(
      new PsClient(std::make_unique<Impl>(options, std::move(shards))));
}

PsClient::PsClient(std::unique_ptr<Impl> impl) : impl_(std::move(impl)) {}
PsClient::~PsClient() = default;

absl::StatusOr<RegisterResult> PsClient::Register(
    int rank, const ModelSignature& signature, absl::Duration timeout) {
  return impl_->Register(rank, signature, timeout);
}
absl::Status PsClient::Initialize(absl::Span<const float> weights) {
  return impl_->membership().Initialize(weights);
}
absl::StatusOr<int64_t> PsClient::Pull(int64_t min_version,
                                       absl::Span<float> weights, bool exact) {
  return impl_->membership().Pull(min_version, weights, exact);
}
absl::StatusOr<int64_t> PsClient::PushPull(int64_t step,
                                           absl::Span<const float> gradient,
                                           absl::Span<float> weights) {
  return impl_->PushPull(step, gradient, weights);
}
absl::Status PsClient::BeginStep(int64_t step, absl::Span<const float> gradient,
                                 absl::Span<float> weights) {
  return impl_->BeginStep(step, gradient, weights);
}
void PsClient::GradientReady(int64_t begin, int64_t end) {
  impl_->GradientReady(begin, end);
}
void PsClient::AbandonStep() { impl_->AbandonStep(); }

absl::StatusOr<int64_t> PsClient::FinishStep() { return impl_->FinishStep(); }
void PsClient::SetPushSlot(const PushSlot& slot) { impl_->SetPushSlot(slot); }
void PsClient::SetStepReport(const StepReport& report) {
  impl_->SetStepReport(report);
}
absl::StatusOr<int64_t> PsClient::PushShards(int64_t step,
                                             absl::Span<const PushSlot> slots,
                                             absl::Span<const float> gradients,
                                             absl::Span<float> weights) {
  return impl_->PushShards(step, slots, gradients, weights);
}
absl::StatusOr<std::vector<double>> PsClient::Average(
    const std::string& name, absl::Span<const double> values,
    absl::Duration timeout) {
  return impl_->membership().Average(name, values, timeout);
}
absl::Status PsClient::StepBack(int shard, int64_t from, int64_t to) {
  return impl_->membership().StepBack(shard, from, to);
}
absl::Status PsClient::Leave(const LeaveNote& note) {
  return impl_->membership().Leave(note);
}
absl::Status PsClient::LeaveFromAnyThread() {
  return impl_->membership().LeaveFromAnyThread();
}
absl::Status PsClient::LeaveUnregistered(int rank, const LeaveNote& note) {
  return impl_->membership().LeaveAs(
      rank,
      std::vector<int64_t>(impl_->membership().num_shards(),
                           /*incarnation=*/0),
      note);
}
StepTimings PsClient::step_timings() const { return impl_->step_timings(); }

int PsClient::push_window() const { return impl_->push_window(); }

}  // namespace lockstep
