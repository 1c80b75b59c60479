#include "worker/ps_client.h"

#include <grpcpp/generic/generic_stub.h>
#include <grpcpp/grpcpp.h>

#include <algorithm>
#include <atomic>
#include <deque>
#include <optional>
#include <utility>

#include "absl/strings/str_cat.h"
#include "absl/base/thread_annotations.h"
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
    for (int i = plan_->num_chunks() - 1; i >= 0; --i) {
      if (step_->missing[i] > 0) {
        step_->missing[i] = 0;
        Ready(i);
      }
    }
    const absl::Time wait_start = absl::Now();
    step_->pending.Wait();
    timings_.wait_seconds += absl::ToDoubleSeconds(absl::Now() - wait_start);
    ++timings_.steps;
    absl::StatusOr<int64_t> result;
    const int64_t step = step_->step;
    bool unsent = false;
    for (const Chunk& chunk : plan_->chunks()) {
      if (step_->calls[chunk.index] == nullptr) {
        // Dropped from the window's queue after another push failed.
        unsent = true;
        continue;
      }
      const PushCall& call = *step_->calls[chunk.index];
      if (!call.status.ok()) {
        result = Annotate(call.status, absl::StrCat("Push of step ", step),
                          chunk.index);
        break;
      }
      if (!call.decoded.ok()) {
        result = call.decoded;
        break;
      }
      // Chunks may stand at different versions (with backup workers or
      // asynchronous modes); the step's result is the oldest.
      result = result.ok() ? std::min(*result, call.version) : call.version;
    }
    if (result.ok() && unsent) {
      // Only a failed push closes a step before FinishStep returns.
      result = absl::InternalError(absl::StrCat(
          "step ", step, " ended with chunks never pushed and no failure"));
    }
    step_.reset();
    return result;
  }

  size_t num_shards() const { return stubs_.size(); }

  // Waits for the pushes already sent and drops the rest; run when a step
  // is abandoned, so no gRPC callback outlives the state it writes to.
  ~Impl() {
    if (!step_.has_value()) return;
    int dropped = Close();
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
    timings.encode_seconds = seconds(encode_ns_);
    timings.send_seconds = seconds(send_ns_);
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
  };
  // One step in flight: its vectors, what each chunk still lacks, and the
  // calls (which grpc requires to stay put until they complete). `pending`
  // counts the chunks not yet answered (or dropped).
  //
  // The push window: at most options_.max_pushes_in_flight pushes are out
  // to each shard at once; chunks that become ready meanwhile wait in their
  // shard's queue, in the order they became ready, and each reply (on
  // gRPC's thread) sends the next to that shard. Every worker readies its
  // chunks in the same order, so every barrier the windows wait on is one
  // that every worker pushes to.
  struct StepState {
    StepState(int chunks, int shards)
        : missing(chunks),
          calls(chunks),
          pending(chunks),
          queued(shards),
          in_flight(shards, 0) {}
    int64_t step = 0;
    absl::Span<const float> gradient;
    absl::Span<float> weights;
    std::vector<int64_t> missing;  // Elements not yet ready, by chunk.
    std::vector<std::unique_ptr<PushCall>> calls;
    absl::BlockingCounter pending;
    absl::Mutex mu;
    std::vector<std::deque<int>> queued ABSL_GUARDED_BY(mu);  // By shard.
    std::vector<int> in_flight ABSL_GUARDED_BY(mu);           // By shard.
    // After a failed push or when the step is abandoned: send no more.
    bool closed ABSL_GUARDED_BY(mu) = false;
  };

  // Chunk `index` is ready: pushes it now if its shard's window has room,
  // else queues it; drops it when the step is closed.
  void Ready(int index) {
    const int shard = plan_->chunks()[index].shard;
    {
      absl::MutexLock lock(&step_->mu);
      if (step_->closed) {
        step_->pending.DecrementCount();
        return;
      }
      const int window = options_.max_pushes_in_flight;
      if (window > 0 && step_->in_flight[shard] >= window) {
        step_->queued[shard].push_back(index);
        return;
      }
      ++step_->in_flight[shard];
    }
    SendPush(plan_->chunks()[index]);
  }

  // A push to `shard` was answered (on gRPC's thread, before its pending
  // count is released, so the step stays alive): sends the shard's next
  // queued chunk, or after a failure drops every queue, since the step
  // fails anyway.
  void Replied(int shard, bool ok) {
    int next = -1;
    int dropped = 0;
    {
      absl::MutexLock lock(&step_->mu);
      --step_->in_flight[shard];
      if (!ok) step_->closed = true;
      if (step_->closed) {
        dropped = DropQueuedLocked();
      } else if (!step_->queued[shard].empty()) {
        next = step_->queued[shard].front();
        step_->queued[shard].pop_front();
        ++step_->in_flight[shard];
      }
    }
    for (int i = 0; i < dropped; ++i) step_->pending.DecrementCount();
    if (next >= 0) SendPush(plan_->chunks()[next]);
  }

  // Closes the step; returns how many queued chunks it dropped (their
  // pending counts are the caller's to release).
  int Close() {
    absl::MutexLock lock(&step_->mu);
    step_->closed = true;
    return DropQueuedLocked();
  }

  int DropQueuedLocked() ABSL_EXCLUSIVE_LOCKS_REQUIRED(step_->mu) {
    int dropped = 0;
    for (std::deque<int>& queue : step_->queued) {
      dropped += static_cast<int>(queue.size());
      queue.clear();
    }
    return dropped;
  }

  void SendPush(const Chunk& chunk) {
    auto call = std::make_unique<PushCall>();
    PushCall* c = call.get();
    c->context.set_deadline(DeadlineAfter(options_.step_timeout));
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
    const absl::Time send_start = absl::Now();
    encode_ns_.fetch_add(absl::ToInt64Nanoseconds(send_start - encode_start),
                         std::memory_order_relaxed);
    step_->calls[chunk.index] = std::move(call);
    // The reply is decoded on gRPC's thread as soon as it arrives; chunks
    // write disjoint ranges of the weights.
    absl::Span<float> out = step_->weights.subspan(chunk.offset, chunk.size);
    const int64_t expected = step_->step + 1;
    absl::BlockingCounter* pending = &step_->pending;
    const WireDType dtype = options_.wire_dtype;
    const int index = chunk.index;
    const int shard = chunk.shard;
    raw_stubs_[chunk.shard]->UnaryCall(
        &c->context, kPushMethod, grpc::StubOptions(), &c->request,
        &c->response,
        [this, c, out, expected, pending, dtype, index,
         shard](grpc::Status s) {
          c->status = std::move(s);
          if (c->status.ok()) {
            const absl::Time start = absl::Now();
            c->decoded = DecodeReply(*c, out, expected, dtype, index);
            decode_ns_.fetch_add(
                absl::ToInt64Nanoseconds(absl::Now() - start),
                std::memory_order_relaxed);
          }
          Replied(shard, c->status.ok());
          pending->DecrementCount();
        });
    send_ns_.fetch_add(absl::ToInt64Nanoseconds(absl::Now() - send_start),
                       std::memory_order_relaxed);
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
  // Client-side time for benchmarks. The training thread writes timings_'s
  // step count and wait; pushes, sent from the training thread or from
  // gRPC's (the window), and decoding, on gRPC's, add to the atomics.
  StepTimings timings_;
  std::atomic<int64_t> encode_ns_{0};
  std::atomic<int64_t> send_ns_{0};
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
