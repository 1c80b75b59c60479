#include "worker/ps_client.h"

#include <grpcpp/generic/generic_stub.h>
#include <grpcpp/grpcpp.h>

#include <algorithm>
#include <atomic>
#include <deque>
#include <optional>
#include <utility>

#include "absl/base/thread_annotations.h"
#include "absl/strings/str_cat.h"
#include "absl/synchronization/blocking_counter.h"
#include "absl/synchronization/mutex.h"
#include "common/grpc_status.h"
#include "common/signature_proto.h"
#include "common/status_macros.h"
#include "common/tls.h"
#include "common/tls_flags.h"
#include "common/wire_codec.h"
#include "common/wire_format.h"
#include "lockstep/v1/lockstep.grpc.pb.h"

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
    }
  }

  absl::StatusOr<RegisterResult> Register(int rank,
                                          const ModelSignature& signature,
                                          absl::Duration timeout) {
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
    absl::BlockingCounter pending(static_cast<int>(stubs_.size()));
    for (size_t shard = 0; shard < stubs_.size(); ++shard) {
      RegisterCall& call = calls[shard];
      call.context.set_deadline(
          DeadlineAfter(std::min(timeout, options_.connect_timeout)));
      call.context.set_wait_for_ready(true);  // Servers may still be starting.
      call.request = request;
      stubs_[shard]->async()->Register(&call.context, &call.request,
                                       &call.response,
                                       [&call, &pending](grpc::Status s) {
                                         call.status = std::move(s);
                                         pending.DecrementCount();
                                       });
    }
    pending.Wait();
    RegisterResult result;
    incarnations_.clear();
    for (size_t shard = 0; shard < stubs_.size(); ++shard) {
      const RegisterCall& call = calls[shard];
      if (!call.status.ok()) {
        absl::Status s = FromGrpcStatus(call.status);
        return absl::Status(s.code(),
                            absl::StrCat("registering with shard ", shard,
                                         " at ", options_.servers[shard], ": ",
                                         s.message()));
      }
      incarnations_.push_back(call.response.incarnation());
      result.must_initialize |= call.response.must_initialize();
      result.version = shard == 0 ? call.response.version()
                                  : std::min(result.version,
                                             call.response.version());
    }
    result.incarnation = incarnations_[0];
    plan_ = std::move(plan);
    rank_ = rank;
    return result;
  }

  absl::Status Initialize(absl::Span<const float> weights) {
    RETURN_IF_ERROR(CheckRegistered(weights.size()));
    using InitCall = Call<v1::InitializeRequest, v1::InitializeResponse>;
    std::vector<InitCall> calls(plan_->num_chunks());
    absl::BlockingCounter pending(plan_->num_chunks());
    for (const Chunk& chunk : plan_->chunks()) {
      InitCall& call = calls[chunk.index];
      call.context.set_deadline(DeadlineAfter(options_.rpc_timeout));
      call.request.set_rank(rank_);
      call.request.set_incarnation(incarnations_[chunk.shard]);
      call.request.set_chunk(chunk.index);
      EncodeFloat32(weights.subspan(chunk.offset, chunk.size),
                    call.request.mutable_data());
      stubs_[chunk.shard]->async()->Initialize(&call.context, &call.request, &call.response,
                                 [&call, &pending](grpc::Status s) {
                                   call.status = std::move(s);
                                   pending.DecrementCount();
                                 });
    }
    pending.Wait();
    for (const Chunk& chunk : plan_->chunks()) {
      if (!calls[chunk.index].status.ok()) {
        return Annotate(calls[chunk.index].status, "Initialize", chunk.index);
      }
    }
    return absl::OkStatus();
  }

  absl::StatusOr<int64_t> Pull(int64_t min_version, absl::Span<float> weights) {
    RETURN_IF_ERROR(CheckRegistered(weights.size()));
    using PullCall = Call<v1::PullRequest, v1::PullResponse>;
    std::vector<PullCall> calls(plan_->num_chunks());
    absl::BlockingCounter pending(plan_->num_chunks());
    for (const Chunk& chunk : plan_->chunks()) {
      PullCall& call = calls[chunk.index];
      call.context.set_deadline(DeadlineAfter(options_.rpc_timeout));
      call.request.set_chunk(chunk.index);
      call.request.set_min_version(min_version);
      call.request.set_rank(rank_);
      call.request.set_incarnation(incarnations_[chunk.shard]);
      call.request.set_dtype(ProtoDType());
      stubs_[chunk.shard]->async()->Pull(&call.context, &call.request, &call.response,
                           [&call, &pending](grpc::Status s) {
                             call.status = std::move(s);
                             pending.DecrementCount();
                           });
    }
    pending.Wait();
    int64_t version = -1;
    for (const Chunk& chunk : plan_->chunks()) {
      const PullCall& call = calls[chunk.index];
      if (!call.status.ok()) {
        return Annotate(call.status, "Pull", chunk.index);
      }
      RETURN_IF_ERROR(DecodeTensor(call.response.data(), options_.wire_dtype,
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
    if (step_.has_value()) {
      return absl::FailedPreconditionError(
          absl::StrCat("step ", step_->step, " is still in flight"));
    }
    step_.emplace(plan_->num_chunks(), static_cast<int>(stubs_.size()));
    step_->step = step;
    step_->gradient = gradient;
    step_->weights = weights;
    step_->deadline = absl::Now() + options_.step_timeout;
    for (const Chunk& chunk : plan_->chunks()) {
      step_->missing[chunk.index] = chunk.size;
    }
    return absl::OkStatus();
  }

  void GradientReady(int64_t begin, int64_t end) {
    if (!step_.has_value()) return;
    begin = std::max<int64_t>(begin, 0);
    end = std::min(end, plan_->num_elements());
    if (begin >= end) return;
    const int64_t per_chunk = plan_->elements_per_chunk();
    const int first = static_cast<int>(begin / per_chunk);
    const int last = static_cast<int>((end - 1) / per_chunk);
    // Within a call, later chunks go first: backprop produces the last
    // layers first, and their pushes have the longest to wait for.
    for (int i = last; i >= first; --i) {
      const Chunk& chunk = plan_->chunks()[i];
      const int64_t overlap = std::min(end, chunk.offset + chunk.size) -
                              std::max(begin, chunk.offset);
      int64_t& missing = step_->missing[i];
      if (missing <= 0) continue;
      missing -= overlap;
      if (missing <= 0) Ready(chunk.index);
    }
  }

  absl::StatusOr<int64_t> FinishStep() {
    if (!step_.has_value()) {
      return absl::FailedPreconditionError("no step in flight");
    }
    // The chunks not yet ready go in the order backprop readies them --
    // parameters, last first, then the state -- so that every worker's
    // windows wait on the same barriers even when this step's compute
    // stopped early.
    for (const bool state : {false, true}) {
      for (int i = plan_->num_chunks() - 1; i >= 0; --i) {
        if (plan_->chunks()[i].state == state && step_->missing[i] > 0) {
          step_->missing[i] = 0;
          Ready(i);
        }
      }
    }
    const absl::Time wait_start = absl::Now();
    step_->pending.Wait();
    timings_.wait_seconds += absl::ToDoubleSeconds(absl::Now() - wait_start);
    ++timings_.steps;
    absl::StatusOr<int64_t> result = StepResult();
    step_.reset();
    return result;
  }

  size_t num_shards() const { return stubs_.size(); }

  // Waits for the pushes already sent and drops the rest; run when a step
  // is abandoned, so no gRPC callback outlives the state it writes to.
  ~Impl() {
    if (!step_.has_value()) return;
    int dropped = 0;
    {
      absl::MutexLock lock(&step_->mu);
      step_->abandoned = true;
      for (std::deque<int>& queue : step_->queued) {
        dropped += static_cast<int>(queue.size());
        queue.clear();
      }
    }
    for (int64_t& missing : step_->missing) {
      if (missing > 0) {
        missing = 0;
        ++dropped;
      }
    }
    for (int i = 0; i < dropped; ++i) step_->pending.DecrementCount();
    step_->pending.Wait();
  }

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

  // A push travels as raw bytes (common/wire_format.h): fp32 gradients are
  // sent from the caller's buffer, replies decoded from gRPC's slices.
  struct PushCall {
    grpc::ClientContext context;
    std::string encoded;  // bf16/fp16 payload; fp32 is sent in place.
    grpc::ByteBuffer request;
    grpc::ByteBuffer response;
    grpc::Status status;
    absl::Status decoded;  // Outcome of decoding the reply's weights.
    int64_t version = 0;   // The reply's version.
    bool started = false;  // False: never sent (its shard failed first).
  };
  // One step in flight: its vectors, what each chunk still lacks, and the
  // calls (which grpc requires to stay put until they complete). `pending`
  // counts the chunks not yet answered or dropped.
  //
  // The push window: at most options_.max_pushes_in_flight pushes are out
  // to each shard at once. A chunk is encoded and framed when it becomes
  // ready (on the caller's thread); if its shard's window is full it waits
  // in the shard's queue, in the order chunks became ready, and each reply
  // (on gRPC's thread) starts the next. Every worker readies its chunks in
  // the same order (see FinishStep), so every barrier the windows wait on
  // is one that every worker pushes to. A failed push stops its shard only:
  // the other shards still get every chunk, which the other workers'
  // pushes there are waiting for.
  struct StepState {
    StepState(int chunks, int shards)
        : missing(chunks),
          calls(chunks),
          pending(chunks),
          queued(shards),
          in_flight(shards, 0),
          failed(shards, false) {}
    int64_t step = 0;
    absl::Span<const float> gradient;
    absl::Span<float> weights;
    absl::Time deadline;           // Of every push of the step.
    std::vector<int64_t> missing;  // Elements not yet ready, by chunk.
    std::vector<std::unique_ptr<PushCall>> calls;
    absl::BlockingCounter pending;
    absl::Mutex mu;
    std::vector<std::deque<int>> queued ABSL_GUARDED_BY(mu);  // By shard.
    std::vector<int> in_flight ABSL_GUARDED_BY(mu);           // By shard.
    std::vector<bool> failed ABSL_GUARDED_BY(mu);             // By shard.
    bool abandoned ABSL_GUARDED_BY(mu) = false;  // ~Impl: push no more.
    // The failure that stopped a shard first: the step's result.
    absl::Status first_failure ABSL_GUARDED_BY(mu);
  };

  // Chunk `index` is ready: frames its push, then starts it if its shard's
  // window has room, else queues it; drops it when its shard has failed.
  void Ready(int index) {
    const Chunk& chunk = plan_->chunks()[index];
    PreparePush(chunk);
    {
      absl::MutexLock lock(&step_->mu);
      if (step_->abandoned || step_->failed[chunk.shard]) {
        step_->pending.DecrementCount();
        return;
      }
      const int window = options_.max_pushes_in_flight;
      if (window > 0 && step_->in_flight[chunk.shard] >= window) {
        step_->queued[chunk.shard].push_back(index);
        return;
      }
      ++step_->in_flight[chunk.shard];
    }
    StartPush(chunk, /*caller_thread=*/true);
  }

  // The push of chunk `index` to `shard` was answered (on gRPC's thread,
  // before its pending count is released, so the step stays alive): starts
  // the shard's next queued push, or after a failure drops the shard's
  // queue.
  void Replied(int index, int shard) {
    const PushCall& call = *step_->calls[index];
    int next = -1;
    int dropped = 0;
    {
      absl::MutexLock lock(&step_->mu);
      std::deque<int>& queue = step_->queued[shard];
      --step_->in_flight[shard];
      if (!call.status.ok()) {
        if (step_->first_failure.ok()) {
          step_->first_failure = Annotate(
              call.status, absl::StrCat("Push of step ", step_->step), index);
        }
        step_->failed[shard] = true;
        dropped = static_cast<int>(queue.size());
        queue.clear();
      } else if (!step_->abandoned && !queue.empty()) {
        next = queue.front();
        queue.pop_front();
        ++step_->in_flight[shard];
      }
    }
    for (int i = 0; i < dropped; ++i) step_->pending.DecrementCount();
    if (next >= 0) StartPush(plan_->chunks()[next], /*caller_thread=*/false);
  }

  // After every push is answered or dropped: the first push failure, a
  // reply that did not decode, or the oldest version the replies carry.
  absl::StatusOr<int64_t> StepResult() {
    {
      absl::MutexLock lock(&step_->mu);
      if (!step_->first_failure.ok()) return step_->first_failure;
    }
    absl::StatusOr<int64_t> result =
        absl::InternalError("a step without chunks");
    for (const Chunk& chunk : plan_->chunks()) {
      const PushCall& call = *step_->calls[chunk.index];
      if (!call.started) {
        return absl::InternalError(absl::StrCat(
            "chunk ", chunk.index, " of step ", step_->step,
            " was never pushed, and no push failed"));
      }
      RETURN_IF_ERROR(call.decoded);
      // Chunks may stand at different versions (with backup workers or
      // asynchronous modes); the step's result is the oldest.
      result = result.ok() ? std::min(*result, call.version) : call.version;
    }
    return result;
  }

  // Encodes and frames the push of `chunk` (the caller's thread).
  void PreparePush(const Chunk& chunk) {
    auto call = std::make_unique<PushCall>();
    PushCall* c = call.get();
    c->context.set_deadline(absl::ToChronoTime(step_->deadline));
    const absl::Time encode_start = absl::Now();
    const absl::Span<const float> values =
        step_->gradient.subspan(chunk.offset, chunk.size);
    absl::string_view payload;
    if (options_.wire_dtype == WireDType::kFloat32) {
      payload = absl::string_view(reinterpret_cast<const char*>(values.data()),
                                  values.size() * sizeof(float));
    } else {
      EncodeTensor(values, options_.wire_dtype, &c->encoded);
      payload = c->encoded;
    }
    c->request = MakePushRequest(rank_, incarnations_[chunk.shard],
                                 step_->step, chunk.index, ProtoDType(),
                                 payload);
    timings_.encode_seconds +=
        absl::ToDoubleSeconds(absl::Now() - encode_start);
    step_->calls[chunk.index] = std::move(call);
  }

  // Starts the prepared push of `chunk` (any thread: a reply's callback
  // starts the next push of its shard). Its reply is decoded on gRPC's
  // thread as soon as it arrives; chunks write disjoint ranges of the
  // weights.
  void StartPush(const Chunk& chunk, bool caller_thread) {
    PushCall* c = step_->calls[chunk.index].get();
    c->started = true;
    const absl::Time send_start = absl::Now();
    absl::Span<float> out = step_->weights.subspan(chunk.offset, chunk.size);
    const int64_t expected = step_->step + 1;
    absl::BlockingCounter* pending = &step_->pending;
    const WireDType dtype = options_.wire_dtype;
    const int index = chunk.index;
    const int shard = chunk.shard;
    raw_stubs_[shard]->UnaryCall(
        &c->context, kPushMethod, grpc::StubOptions(), &c->request,
        &c->response,
        [this, c, index, shard, out, expected, pending,
         dtype](grpc::Status s) {
          c->status = std::move(s);
          if (c->status.ok()) {
            const absl::Time start = absl::Now();
            c->decoded = DecodeReply(*c, out, expected, dtype, index);
            decode_ns_.fetch_add(
                absl::ToInt64Nanoseconds(absl::Now() - start),
                std::memory_order_relaxed);
          }
          Replied(index, shard);
          pending->DecrementCount();
        });
    // Only the caller's time: a held-back push starts inside the wait.
    if (caller_thread) {
      timings_.send_seconds += absl::ToDoubleSeconds(absl::Now() - send_start);
    }
  }

  static absl::Status DecodeReply(PushCall& call, absl::Span<float> out,
                                  int64_t expected, WireDType dtype,
                                  int chunk) {
    ASSIGN_OR_RETURN(WeightsView reply, ParseWeightsReply(call.response));
    if (reply.version < expected) {
      return absl::InternalError(absl::StrCat(
          "push of chunk ", chunk, " was answered with version ",
          reply.version, ", expected at least ", expected));
    }
    call.version = reply.version;
    return DecodePieces(reply.data, dtype, out);
  }

  v1::DType ProtoDType() const {
    switch (options_.wire_dtype) {
      case WireDType::kFloat32: return v1::DTYPE_FLOAT32;
      case WireDType::kBfloat16: return v1::DTYPE_BFLOAT16;
      case WireDType::kFloat16: return v1::DTYPE_FLOAT16;
    }
    return v1::DTYPE_FLOAT32;
  }

  static constexpr char kPushMethod[] = "/lockstep.v1.ParameterServer/Push";

  const PsClientOptions options_;
  std::vector<std::unique_ptr<v1::ParameterServer::Stub>> stubs_;  // By shard.
  std::vector<std::unique_ptr<grpc::GenericStub>> raw_stubs_;      // By shard.
  std::optional<StepState> step_;
  std::optional<ChunkPlan> plan_;
  int rank_ = -1;
  std::vector<int64_t> incarnations_;  // By shard.
  // Client-side time for benchmarks: the training thread writes timings_;
  // decoding, on gRPC's threads, adds to decode_ns_.
  StepTimings timings_;
  std::atomic<int64_t> decode_ns_{0};
};

absl::StatusOr<std::unique_ptr<PsClient>> PsClient::Create(
    const PsClientOptions& options) {
  if (options.servers.empty()) {
    return absl::InvalidArgumentError("no parameter-server address given");
  }
  TlsOptions tls;
  if (options.tls.has_value()) {
    tls = *options.tls;
  } else {
    ASSIGN_OR_RETURN(tls, TlsOptionsFromFlags());
  }
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
                                       absl::Span<float> weights) {
  return impl_->Pull(min_version, weights);
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
absl::StatusOr<int64_t> PsClient::FinishStep() {
  return impl_->FinishStep();
}
absl::Status PsClient::Leave() { return impl_->Leave(); }
absl::Status PsClient::LeaveUnregistered(int rank) {
  return impl_->LeaveAs(rank, std::vector<int64_t>(
                                  impl_->num_shards(), /*incarnation=*/0));
}
StepTimings PsClient::step_timings() const { return impl_->step_timings(); }

}  // namespace lockstep
