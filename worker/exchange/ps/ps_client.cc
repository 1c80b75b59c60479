#include "worker/exchange/ps/ps_client.h"

#include <algorithm>
#include <atomic>
#include <optional>
#include <utility>

#include "absl/strings/str_cat.h"
#include "absl/synchronization/blocking_counter.h"
#include "absl/synchronization/mutex.h"
#include "common/base/status_macros.h"
#include "common/wire/wire_codec.h"
#include "common/wire/wire_dtype_proto.h"  // ChunkWireDType
#include "worker/exchange/ps/grpc_shard_transport.h"
#include "worker/exchange/ps/push_step.h"

namespace lockstep {
namespace {

// The fan-out every multi-call request uses: start(i, done) starts call i
// of `n` (to a shard, or for a chunk), which hands its status to `done`;
// returns every call's status once all have finished.
std::vector<absl::Status> StartAllAndWait(
    int n,
    const std::function<void(int, ShardTransport::StatusCallback)>& start) {
  std::vector<absl::Status> statuses(n);
  absl::BlockingCounter pending(n);
  for (int i = 0; i < n; ++i) {
    start(i, [&statuses, &pending, i](absl::Status s) {
      statuses[i] = std::move(s);
      pending.DecrementCount();
    });
  }
  pending.Wait();
  return statuses;
}

// Names the request and chunk in an error, keeping the code.
absl::Status Annotate(const absl::Status& s, absl::string_view rpc, int chunk) {
  return absl::Status(s.code(), absl::StrCat(rpc, " of chunk ", chunk, ": ",
                                             s.message()));
}

}  // namespace

class PsClient::Impl {
 public:
  Impl(const PsClientOptions& options,
       std::vector<std::unique_ptr<ShardTransport>> shards)
      : options_(options), shards_(std::move(shards)) {
    for (const std::unique_ptr<ShardTransport>& shard : shards_) {
      push_target_.shards.push_back(shard.get());
    }
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

  absl::StatusOr<RegisterResult> Register(int rank,
                                          const ModelSignature& requested,
                                          absl::Duration timeout) {
    // The job's chunk size, the same in every worker: each resolves `auto`
    // from the same model and shard count.
    ModelSignature signature = requested;
    signature.chunk_bytes = ResolveChunkBytes(
        requested.chunk_bytes,
        requested.NumParameters() + requested.NumStateElements(),
        requested.num_shards);
    if (signature.num_shards != num_shards()) {
      return absl::InvalidArgumentError(absl::StrCat(
          "the signature says ", signature.num_shards, " shard(s) but ",
          num_shards(), " server address(es) were given"));
    }
    ASSIGN_OR_RETURN(ChunkPlan plan,
                     ChunkPlan::Create(signature.NumParameters(),
                                       signature.chunk_bytes,
                                       signature.num_shards,
                                       signature.NumStateElements()));
    const absl::Duration waited = std::min(timeout, options_.connect_timeout);
    const absl::Time deadline = options_.env->Now() + waited;
    std::vector<ShardRegistration> replies(num_shards());
    const std::vector<absl::Status> statuses = StartAllAndWait(
        num_shards(), [&](int shard, ShardTransport::StatusCallback done) {
          shards_[shard]->Register(rank, signature, deadline, &replies[shard],
                                   std::move(done));
        });
    RegisterResult result;
    incarnations_.clear();
    for (int shard = 0; shard < num_shards(); ++shard) {
      if (!statuses[shard].ok()) {
        return RegisterError(shard, statuses[shard], waited);
      }
      const ShardRegistration& reply = replies[shard];
      incarnations_.push_back(reply.incarnation);
      result.must_initialize |= reply.must_initialize;
      result.version =
          shard == 0 ? reply.version : std::min(result.version, reply.version);
      result.newest_version = std::max(result.newest_version, reply.version);
    }
    result.incarnation = incarnations_[0];
    Registered(rank, signature, std::move(plan));
    return result;
  }

  absl::Status Initialize(absl::Span<const float> weights) {
    RETURN_IF_ERROR(CheckRegistered(weights.size()));
    const absl::Time deadline = options_.env->Now() + options_.rpc_timeout;
    const std::vector<absl::Status> statuses =
        StartAllAndWait(plan_->num_chunks(),
                        [&](int index, ShardTransport::StatusCallback done) {
                          const Chunk& chunk = plan_->chunks()[index];
                          shards_[chunk.shard]->Initialize(
                              rank_, incarnations_[chunk.shard], chunk.index,
                              weights.subspan(chunk.offset, chunk.size),
                              deadline, std::move(done));
                        });
    for (const Chunk& chunk : plan_->chunks()) {
      if (!statuses[chunk.index].ok()) {
        return Annotate(statuses[chunk.index], "Initialize", chunk.index);
      }
    }
    return absl::OkStatus();
  }

  absl::StatusOr<int64_t> Pull(int64_t min_version, absl::Span<float> weights,
                               bool exact) {
    RETURN_IF_ERROR(CheckRegistered(weights.size()));
    const absl::Time deadline = options_.env->Now() + options_.rpc_timeout;
    std::vector<absl::Status> decoded(plan_->num_chunks());
    std::vector<int64_t> versions(plan_->num_chunks());
    const std::vector<absl::Status> statuses = StartAllAndWait(
        plan_->num_chunks(),
        [&](int index, ShardTransport::StatusCallback done) {
          const Chunk& chunk = plan_->chunks()[index];
          PullArgs args{rank_,       incarnations_[chunk.shard],
                        chunk.index, min_version,
                        exact,       DTypeOf(chunk),
                        deadline};
          const absl::Span<float> out =
              weights.subspan(chunk.offset, chunk.size);
          shards_[chunk.shard]->Pull(
              args, [&, index, out, dtype = args.dtype, done = std::move(done)](
                        const absl::Status& status,
                        const absl::StatusOr<WeightsPieces>& reply) {
                if (status.ok()) {
                  decoded[index] = reply.ok()
                                       ? DecodePieces(reply->data, dtype, out)
                                       : reply.status();
                  if (reply.ok()) versions[index] = reply->version;
                }
                done(status);
              });
        });
    int64_t version = -1;
    for (const Chunk& chunk : plan_->chunks()) {
      if (!statuses[chunk.index].ok()) {
        return Annotate(statuses[chunk.index], "Pull", chunk.index);
      }
      RETURN_IF_ERROR(decoded[chunk.index]);
      // Chunks advance independently; a caller wanting one consistent version
      // passes it as min_version, and all chunks then hold at least it.
      version = version < 0 ? versions[chunk.index]
                            : std::min(version, versions[chunk.index]);
    }
    return version;
  }

  absl::Status BeginStep(int64_t step, absl::Span<const float> gradient,
                         absl::Span<float> weights) {
    RETURN_IF_ERROR(CheckRegistered(gradient.size()));
    RETURN_IF_ERROR(CheckRegistered(weights.size()));
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

  absl::StatusOr<int64_t> PushShards(int64_t step,
                                     absl::Span<const PushSlot> slots,
                                     absl::Span<const float> gradients,
                                     absl::Span<float> weights) {
    RETURN_IF_ERROR(CheckRegistered(weights.size()));
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

  int num_shards() const { return static_cast<int>(shards_.size()); }

  absl::StatusOr<int64_t> PushPull(int64_t step,
                                   absl::Span<const float> gradient,
                                   absl::Span<float> weights) {
    RETURN_IF_ERROR(BeginStep(step, gradient, weights));
    GradientReady(0, plan_->num_elements());
    return FinishStep();
  }

  absl::Status Leave() {
    if (!plan_.has_value()) return absl::OkStatus();
    return LeaveAs(rank_, incarnations_);
  }

  absl::Status LeaveFromAnyThread() {
    absl::ReleasableMutexLock lock(&member_mu_);
    if (member_.rank < 0) return absl::OkStatus();
    const Membership member = member_;
    lock.Release();
    return LeaveAs(member.rank, member.incarnations);
  }

  // Thread-safe: reads only what is set at construction.
  absl::Status LeaveAs(int rank, const std::vector<int64_t>& incarnations) {
    const absl::Time deadline = CancelToken::LeaveDeadline(
        options_.cancel, options_.env->Now() + options_.rpc_timeout);
    absl::Status result;
    for (const absl::Status& s : StartAllAndWait(
             num_shards(), [&](int shard, ShardTransport::StatusCallback done) {
               shards_[shard]->Leave(rank, incarnations[shard], deadline,
                                     std::move(done));
             })) {
      result.Update(s);
    }
    return result;
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
  // Registering with `shard` failed with `s` after waiting up to `waited`.
  absl::Status RegisterError(int shard, const absl::Status& s,
                             absl::Duration waited) const {
    // Waiting for a server that never came says only "Deadline
    // Exceeded": say what was waited for, and how long.
    const std::string hint =
        s.code() == absl::StatusCode::kDeadlineExceeded
            ? absl::StrCat(" (no answer within ", absl::FormatDuration(waited),
                           ": is a lockstep_server listening there?",
                           waited == options_.connect_timeout
                               ? "; a longer connect timeout waits longer"
                               : "",
                           ")")
            : "";
    return absl::Status(
        s.code(),
        absl::StrCat("registering with shard ", shard, " at ",
                     shards_[shard]->Describe(), ": ", s.message(), hint));
  }

  // Registered as `rank` for `signature`, chunked by `plan`: what the steps
  // push with.
  void Registered(int rank, const ModelSignature& signature, ChunkPlan plan) {
    plan_ = std::move(plan);
    rank_ = rank;
    push_target_.plan = &*plan_;
    push_target_.window = ResolvePushWindow(
        options_.max_pushes_in_flight, signature.num_workers,
        std::min(plan_->elements_per_chunk(), plan_->num_elements()),
        options_.wire_dtype);
    encoded_.resize(plan_->num_chunks());
    push_target_.rank = rank;
    push_target_.incarnations = incarnations_;
    push_target_.synchronous = signature.sync.mode == SyncMode::kSync;
    absl::MutexLock lock(&member_mu_);
    member_ = Membership{rank, incarnations_};
  }

  absl::Status CheckRegistered(size_t size) const {
    if (!plan_.has_value()) {
      return absl::FailedPreconditionError("not registered with the server");
    }
    if (static_cast<int64_t>(size) != plan_->num_elements()) {
      return absl::InvalidArgumentError(
          absl::StrCat("vector has ", size, " values, the model has ",
                       plan_->num_elements()));
    }
    return absl::OkStatus();
  }

  WireDType DTypeOf(const Chunk& chunk) const {
    return ChunkWireDType(chunk, options_.wire_dtype);
  }

  const PsClientOptions options_;
  const std::vector<std::unique_ptr<ShardTransport>> shards_;  // By shard.
  std::optional<ChunkPlan> plan_;
  int rank_ = -1;
  std::vector<int64_t> incarnations_;  // By shard.
  struct Membership {
    int rank = -1;
    std::vector<int64_t> incarnations;
  };
  absl::Mutex member_mu_;  // rank_ and incarnations_ for LeaveFromAnyThread.
  Membership member_ ABSL_GUARDED_BY(member_mu_);
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
  return impl_->Initialize(weights);
}
absl::StatusOr<int64_t> PsClient::Pull(int64_t min_version,
                                       absl::Span<float> weights, bool exact) {
  return impl_->Pull(min_version, weights, exact);
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

absl::StatusOr<int64_t> PsClient::FinishStep() {
  return impl_->FinishStep();
}
void PsClient::SetPushSlot(const PushSlot& slot) { impl_->SetPushSlot(slot); }
absl::StatusOr<int64_t> PsClient::PushShards(int64_t step,
                                             absl::Span<const PushSlot> slots,
                                             absl::Span<const float> gradients,
                                             absl::Span<float> weights) {
  return impl_->PushShards(step, slots, gradients, weights);
}
absl::Status PsClient::Leave() { return impl_->Leave(); }
absl::Status PsClient::LeaveFromAnyThread() {
  return impl_->LeaveFromAnyThread();
}
absl::Status PsClient::LeaveUnregistered(int rank) {
  return impl_->LeaveAs(rank, std::vector<int64_t>(
                                  impl_->num_shards(), /*incarnation=*/0));
}
StepTimings PsClient::step_timings() const { return impl_->step_timings(); }

int PsClient::push_window() const { return impl_->push_window(); }

}  // namespace lockstep
