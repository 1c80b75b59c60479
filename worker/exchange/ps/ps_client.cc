#include "worker/exchange/ps/ps_client.h"

#include <grpcpp/generic/generic_stub.h>
#include <grpcpp/grpcpp.h>

#include <algorithm>
#include <atomic>
#include <optional>
#include <utility>

#include "absl/strings/numbers.h"
#include "absl/strings/str_cat.h"
#include "absl/synchronization/blocking_counter.h"
#include "common/grpc_status.h"
#include "common/signature_proto.h"
#include "common/status_macros.h"
#include "common/tls.h"
#include "common/wire_codec.h"
#include "common/wire_dtype_proto.h"
#include "lockstep/v1/lockstep.grpc.pb.h"
#include "worker/exchange/ps/push_step.h"

namespace lockstep {
namespace {

std::chrono::system_clock::time_point DeadlineAfter(absl::Duration d) {
  return absl::ToChronoTime(absl::Now() + d);
}

// One in-flight unary call.
template <typename Request, typename Response>
struct Call {
  grpc::ClientContext context;
  Request request;
  Response response;
  grpc::Status status;
};

// The fan-out every multi-call RPC uses: start(i, calls[i], done) starts
// call i (to a shard, or for a chunk), which hands its status to `done`;
// returns once every call has finished.
template <typename CallT, typename StartFn>
void StartAllAndWait(std::vector<CallT>& calls, StartFn start) {
  absl::BlockingCounter pending(static_cast<int>(calls.size()));
  for (size_t i = 0; i < calls.size(); ++i) {
    CallT& call = calls[i];
    start(i, call, [&call, &pending](grpc::Status s) {
      call.status = std::move(s);
      pending.DecrementCount();
    });
  }
  pending.Wait();
}

// Names the RPC and chunk in an error, keeping the code.
absl::Status Annotate(const grpc::Status& status, absl::string_view rpc,
                      int chunk) {
  absl::Status s = FromGrpcStatus(status);
  return absl::Status(s.code(), absl::StrCat(rpc, " of chunk ", chunk, ": ",
                                             s.message()));
}

}  // namespace

class PsClient::Impl {
 public:
  // One channel per shard, in shard order.
  Impl(const PsClientOptions& options,
       const std::vector<std::shared_ptr<grpc::Channel>>& channels)
      : options_(options) {
    for (const std::shared_ptr<grpc::Channel>& channel : channels) {
      stubs_.push_back(v1::ParameterServer::NewStub(channel));
      raw_stubs_.push_back(std::make_unique<grpc::GenericStub>(channel));
      push_target_.stubs.push_back(raw_stubs_.back().get());
    }
    push_target_.wire_dtype = options_.wire_dtype;
    push_target_.timings = &timings_;
    push_target_.decode_ns = &decode_ns_;
    push_target_.encoded = &encoded_;
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
    if (signature.num_shards != static_cast<int>(stubs_.size())) {
      return absl::InvalidArgumentError(absl::StrCat(
          "the signature says ", signature.num_shards, " shard(s) but ",
          stubs_.size(), " server address(es) were given"));
    }
    ASSIGN_OR_RETURN(ChunkPlan plan,
                     ChunkPlan::Create(signature.NumParameters(),
                                       signature.chunk_bytes,
                                       signature.num_shards,
                                       signature.NumStateElements()));
    v1::RegisterRequest request;
    request.set_rank(rank);
    SignatureToProto(signature, request.mutable_signature());
    using RegisterCall = Call<v1::RegisterRequest, v1::RegisterResponse>;
    std::vector<RegisterCall> calls(stubs_.size());
    StartAllAndWait(calls, [&](size_t shard, RegisterCall& call, auto done) {
      call.context.set_deadline(
          DeadlineAfter(std::min(timeout, options_.connect_timeout)));
      call.context.set_wait_for_ready(true);  // Servers may still be starting.
      call.request = request;
      stubs_[shard]->async()->Register(&call.context, &call.request,
                                       &call.response, std::move(done));
    });
    RegisterResult result;
    incarnations_.clear();
    for (size_t shard = 0; shard < stubs_.size(); ++shard) {
      const RegisterCall& call = calls[shard];
      if (!call.status.ok()) {
        absl::Status s = FromGrpcStatus(call.status);
        // Waiting for a server that never came says only "Deadline
        // Exceeded": say what was waited for, and how long.
        const absl::Duration waited =
            std::min(timeout, options_.connect_timeout);
        const std::string hint =
            s.code() == absl::StatusCode::kDeadlineExceeded
                ? absl::StrCat(" (no answer within ",
                               absl::FormatDuration(waited),
                               ": is a lockstep_server listening there?",
                               waited == options_.connect_timeout
                                   ? " --connect_timeout_s waits longer"
                                   : "",
                               ")")
                : "";
        return absl::Status(s.code(),
                            absl::StrCat("registering with shard ", shard,
                                         " at ", options_.servers[shard], ": ",
                                         s.message(), hint));
      }
      incarnations_.push_back(call.response.incarnation());
      result.must_initialize |= call.response.must_initialize();
      result.version = shard == 0 ? call.response.version()
                                  : std::min(result.version,
                                             call.response.version());
      result.newest_version =
          std::max(result.newest_version, call.response.version());
    }
    result.incarnation = incarnations_[0];
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
    return result;
  }

  absl::Status Initialize(absl::Span<const float> weights) {
    RETURN_IF_ERROR(CheckRegistered(weights.size()));
    using InitCall = Call<v1::InitializeRequest, v1::InitializeResponse>;
    std::vector<InitCall> calls(plan_->num_chunks());
    StartAllAndWait(calls, [&](size_t index, InitCall& call, auto done) {
      const Chunk& chunk = plan_->chunks()[index];
      call.context.set_deadline(DeadlineAfter(options_.rpc_timeout));
      call.request.set_rank(rank_);
      call.request.set_incarnation(incarnations_[chunk.shard]);
      call.request.set_chunk(chunk.index);
      EncodeFloat32(weights.subspan(chunk.offset, chunk.size),
                    call.request.mutable_data());
      stubs_[chunk.shard]->async()->Initialize(&call.context, &call.request,
                                               &call.response, std::move(done));
    });
    for (const Chunk& chunk : plan_->chunks()) {
      if (!calls[chunk.index].status.ok()) {
        return Annotate(calls[chunk.index].status, "Initialize", chunk.index);
      }
    }
    return absl::OkStatus();
  }

  absl::StatusOr<int64_t> Pull(int64_t min_version, absl::Span<float> weights,
                               bool exact) {
    RETURN_IF_ERROR(CheckRegistered(weights.size()));
    using PullCall = Call<v1::PullRequest, v1::PullResponse>;
    std::vector<PullCall> calls(plan_->num_chunks());
    StartAllAndWait(calls, [&](size_t index, PullCall& call, auto done) {
      const Chunk& chunk = plan_->chunks()[index];
      call.context.set_deadline(DeadlineAfter(options_.rpc_timeout));
      call.request.set_chunk(chunk.index);
      call.request.set_min_version(min_version);
      call.request.set_exact(exact);
      call.request.set_rank(rank_);
      call.request.set_incarnation(incarnations_[chunk.shard]);
      call.request.set_dtype(ToProtoDType(DTypeOf(chunk)));
      stubs_[chunk.shard]->async()->Pull(&call.context, &call.request,
                                         &call.response, std::move(done));
    });
    int64_t version = -1;
    for (const Chunk& chunk : plan_->chunks()) {
      const PullCall& call = calls[chunk.index];
      if (!call.status.ok()) {
        return Annotate(call.status, "Pull", chunk.index);
      }
      RETURN_IF_ERROR(DecodeTensor(call.response.data(), DTypeOf(chunk),
                                   weights.subspan(chunk.offset, chunk.size)));
      // Chunks advance independently; a caller wanting one consistent version
      // passes it as min_version, and all chunks then hold at least it.
      version = version < 0 ? call.response.version()
                            : std::min(version, call.response.version());
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
        absl::Now() + options_.step_timeout);
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

  size_t num_shards() const { return stubs_.size(); }

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

  absl::Status LeaveAs(int rank, const std::vector<int64_t>& incarnations) {
    absl::Status result;
    for (size_t shard = 0; shard < stubs_.size(); ++shard) {
      grpc::ClientContext context;
      context.set_deadline(DeadlineAfter(options_.rpc_timeout));
      v1::LeaveRequest request;
      request.set_rank(rank);
      request.set_incarnation(incarnations[shard]);
      v1::LeaveResponse response;
      result.Update(FromGrpcStatus(stubs_[shard]->Leave(&context, request,
                                                        &response)));
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
  std::vector<std::unique_ptr<v1::ParameterServer::Stub>> stubs_;  // By shard.
  std::vector<std::unique_ptr<grpc::GenericStub>> raw_stubs_;      // By shard.
  std::optional<ChunkPlan> plan_;
  int rank_ = -1;
  std::vector<int64_t> incarnations_;  // By shard.
  // Client-side time for benchmarks: the training thread (and the push
  // thread, which every step waits for before it ends) write timings_, so
  // read it between steps; decoding, on gRPC's threads, adds to decode_ns_.
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
};

absl::StatusOr<std::unique_ptr<PsClient>> PsClient::Create(
    const PsClientOptions& options) {
  if (options.servers.empty()) {
    return absl::InvalidArgumentError("no parameter-server address given");
  }
  const TlsOptions& tls = options.tls;
  grpc::ChannelArguments args;
  args.SetMaxReceiveMessageSize(options.max_message_bytes);
  args.SetMaxSendMessageSize(options.max_message_bytes);
  std::vector<std::shared_ptr<grpc::Channel>> channels;
  for (const std::string& server : options.servers) {
    ASSIGN_OR_RETURN(std::shared_ptr<grpc::Channel> channel,
                     MakeChannel(server, tls, args));
    channels.push_back(std::move(channel));
  }
  return std::unique_ptr<PsClient>(
      new PsClient(std::make_unique<Impl>(options, channels)));
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
absl::Status PsClient::Leave() { return impl_->Leave(); }
absl::Status PsClient::LeaveUnregistered(int rank) {
  return impl_->LeaveAs(rank, std::vector<int64_t>(
                                  impl_->num_shards(), /*incarnation=*/0));
}
StepTimings PsClient::step_timings() const { return impl_->step_timings(); }

int PsClient::push_window() const { return impl_->push_window(); }

int AutoPushWindow(int num_workers, int64_t chunk_wire_bytes) {
  constexpr int64_t kBudget = int64_t{32} << 20;  // Per shard, all workers.
  const int64_t per_round =
      std::max<int64_t>(num_workers, 1) * std::max<int64_t>(chunk_wire_bytes, 1);
  return static_cast<int>(std::clamp<int64_t>(kBudget / per_round, 1, 4));
}

int ResolvePushWindow(int requested, int num_workers, int64_t chunk_elements,
                      WireDType dtype) {
  if (requested != kAutoPushWindow) return requested;
  return AutoPushWindow(num_workers,
                        chunk_elements *
                            static_cast<int64_t>(BytesPerElement(dtype)));
}

absl::StatusOr<int> ParsePushWindow(absl::string_view text) {
  if (text == "auto") return kAutoPushWindow;
  int window = 0;
  if (!absl::SimpleAtoi(text, &window) || window < 0) {
    return absl::InvalidArgumentError(absl::StrCat(
        "push window must be auto or a count >= 0, got \"", text, "\""));
  }
  return window;
}

}  // namespace lockstep
