#include "worker/exchange/ps/grpc_shard_transport.h"

#include <grpcpp/generic/generic_stub.h>
#include <grpcpp/grpcpp.h>

#include <memory>
#include <utility>

#include "absl/strings/match.h"
#include "absl/strings/numbers.h"
#include "absl/strings/str_cat.h"
#include "absl/strings/string_view.h"
#include "common/base/status_macros.h"
#include "common/model/signature_proto.h"
#include "common/rpc/grpc_status.h"
#include "common/rpc/wire_format.h"
#include "common/security/tls.h"
#include "common/wire/wire_dtype_proto.h"
#include "lockstep/v1/lockstep.grpc.pb.h"

namespace lockstep {
namespace {

constexpr char kPushMethod[] = "/lockstep.v1.ParameterServer/Push";

// One in-flight unary call of the generated stub.
template <typename Request, typename Response>
struct Call {
  explicit Call(absl::Time deadline) {
    context.set_deadline(absl::ToChronoTime(deadline));
  }
  grpc::ClientContext context;
  Request request;
  Response response;
};

using Async = v1::ParameterServer::StubInterface::async_interface;

// Lets `token` (may be null) cancel the call of `context`. The canceller
// holds a weak reference: it never reaches a call that is gone, and keeps
// the context alive while it cancels. Returns the id to remove.
uint64_t Watch(CancelToken* token,
               const std::shared_ptr<grpc::ClientContext>& context) {
  if (token == nullptr) return 0;
  return token->Add([weak = std::weak_ptr<grpc::ClientContext>(context)] {
    if (std::shared_ptr<grpc::ClientContext> c = weak.lock()) c->TryCancel();
  });
}

void Unwatch(CancelToken* token, uint64_t id) {
  if (token != nullptr) token->Remove(id);
}

// Starts `call` with the asynchronous `method` of `stub`, cancellable by
// `token`; once it completes the call is released, then `finish` gets the
// status and the response: nothing of the call is left when the caller's
// wait ends (but for a canceller that is cancelling it at that moment).
template <typename Request, typename Response, typename Finish>
void StartCall(v1::ParameterServer::Stub* stub,
               void (Async::*method)(grpc::ClientContext*, const Request*,
                                     Response*,
                                     std::function<void(grpc::Status)>),
               std::shared_ptr<Call<Request, Response>> call,
               CancelToken* token, Finish finish) {
  Call<Request, Response>* raw = call.get();
  const uint64_t id =
      Watch(token, std::shared_ptr<grpc::ClientContext>(call, &raw->context));
  (stub->async()->*method)(
      &raw->context, &raw->request, &raw->response,
      [call = std::move(call), token, id,
       finish = std::move(finish)](grpc::Status s) mutable {
        Unwatch(token, id);
        Response response = std::move(call->response);
        call.reset();
        finish(FromGrpcStatus(s), response);
      });
}

// A framed push and the reply it is answered with; the request refers to
// the payload in place.
struct GrpcPush final : ShardTransport::PreparedPush {
  // Shared with a canceller that may be cancelling it (Watch).
  std::shared_ptr<grpc::ClientContext> context =
      std::make_shared<grpc::ClientContext>();
  uint64_t watch_id = 0;
  grpc::ByteBuffer request;
  grpc::ByteBuffer response;
  ShardTransport::ReplyCallback done;
};

class GrpcShardTransport final : public ShardTransport {
 public:
  GrpcShardTransport(std::string address,
                     const std::shared_ptr<grpc::Channel>& channel,
                     CancelToken* cancel, bool client_tls)
      : address_(std::move(address)),
        cancel_(cancel),
        client_tls_(client_tls),
        stub_(v1::ParameterServer::NewStub(channel)),
        raw_stub_(channel) {}

  std::string Describe() const override { return address_; }

  absl::Status CheckTlsRefusal(absl::Duration timeout) override {
    // Fail-fast (no wait_for_ready): a channel that cannot connect answers
    // at once with its last connection error.
    grpc::ClientContext context;
    context.set_deadline(absl::ToChronoTime(absl::Now() + timeout));
    v1::StatusRequest request;
    v1::StatusResponse response;
    const absl::Status probe =
        FromGrpcStatus(stub_->GetStatus(&context, request, &response));
    if (!IsTlsRefusal(probe, client_tls_)) {
      return CheckPlaintextRefusal(probe, client_tls_,
                                   absl::StrCat("the server ", address_));
    }
    return absl::FailedPreconditionError(absl::StrCat(
        "the TLS handshake with ", address_,
        " was refused: the server did not accept this worker's certificate "
        "or this worker did not accept the server's (",
        probe.message(),
        "); check --tls_cert, --tls_key and --tls_ca against the server's; "
        "retrying will not help"));
  }

  void Register(int rank, const ModelSignature& signature, absl::Time deadline,
                ShardRegistration* reply, StatusCallback done) override {
    auto call =
        std::make_shared<Call<v1::RegisterRequest, v1::RegisterResponse>>(
            deadline);
    call->context.set_wait_for_ready(true);  // Servers may still be starting.
    call->request.set_rank(rank);
    SignatureToProto(signature, call->request.mutable_signature());
    StartCall(stub_.get(), &Async::Register, std::move(call), cancel_,
              [reply, done = std::move(done)](
                  absl::Status s, const v1::RegisterResponse& response) {
                if (s.ok()) {
                  reply->incarnation = response.incarnation();
                  reply->must_initialize = response.must_initialize();
                  reply->version = response.version();
                  reply->checkpoint_versions.assign(
                      response.checkpoint_versions().begin(),
                      response.checkpoint_versions().end());
                }
                done(std::move(s));
              });
  }

  void Initialize(int rank, int64_t incarnation, int chunk,
                  absl::Span<const float> weights, absl::Time deadline,
                  StatusCallback done) override {
    auto call =
        std::make_shared<Call<v1::InitializeRequest, v1::InitializeResponse>>(
            deadline);
    call->request.set_rank(rank);
    call->request.set_incarnation(incarnation);
    call->request.set_chunk(chunk);
    EncodeFloat32(weights, call->request.mutable_data());
    StartCall(stub_.get(), &Async::Initialize, std::move(call), cancel_,
              [done = std::move(done)](absl::Status s,
                                       const v1::InitializeResponse&) {
                done(std::move(s));
              });
  }

  void Pull(const PullArgs& args, ReplyCallback done) override {
    auto call = std::make_shared<Call<v1::PullRequest, v1::PullResponse>>(
        args.deadline);
    call->request.set_chunk(args.chunk);
    call->request.set_min_version(args.min_version);
    call->request.set_exact(args.exact);
    call->request.set_rank(args.rank);
    call->request.set_incarnation(args.incarnation);
    call->request.set_dtype(ToProtoDType(args.dtype));
    StartCall(stub_.get(), &Async::Pull, std::move(call), cancel_,
              [done = std::move(done)](absl::Status s,
                                       const v1::PullResponse& response) {
                const absl::string_view data = response.data();
                done(s, WeightsPieces{response.version(),
                                      absl::MakeConstSpan(&data, 1)});
              });
  }

  // A blocking call on the caller's thread: a worker that leaves may exit
  // at once, with no gRPC callback still running.
  void Leave(int rank, int64_t incarnation, const LeaveNote& note,
             absl::Time deadline, StatusCallback done) override {
    grpc::ClientContext context;
    context.set_deadline(absl::ToChronoTime(deadline));
    v1::LeaveRequest request;
    request.set_rank(rank);
    request.set_incarnation(incarnation);
    // The enum's numbers are the proto's (common/base/leave_note.h).
    request.set_reason(static_cast<v1::LeaveReason>(note.reason));
    request.set_detail(note.detail.substr(0, kMaxLeaveDetailBytes));
    v1::LeaveResponse response;
    done(FromGrpcStatus(stub_->Leave(&context, request, &response)));
  }

  void Average(int rank, int64_t incarnation, int64_t round,
               const std::string& name, absl::Span<const double> values,
               absl::Time deadline, std::vector<double>* mean,
               StatusCallback done) override {
    grpc::ClientContext context;
    context.set_deadline(absl::ToChronoTime(deadline));
    v1::AverageRequest request;
    request.set_rank(rank);
    request.set_incarnation(incarnation);
    request.set_round(round);
    request.set_name(name);
    request.mutable_values()->Assign(values.begin(), values.end());
    v1::AverageResponse response;
    const absl::Status s =
        FromGrpcStatus(stub_->Average(&context, request, &response));
    if (s.ok())
      mean->assign(response.values().begin(), response.values().end());
    done(s);
  }

  void StepBack(int rank, int64_t incarnation, int64_t from, int64_t to,
                absl::Time deadline, StatusCallback done) override {
    grpc::ClientContext context;
    context.set_deadline(absl::ToChronoTime(deadline));
    v1::StepBackRequest request;
    request.set_rank(rank);
    request.set_incarnation(incarnation);
    request.set_from_version(from);
    request.set_to_version(to);
    v1::StepBackResponse response;
    done(FromGrpcStatus(stub_->StepBack(&context, request, &response)));
  }

  std::unique_ptr<PreparedPush> PreparePush(const PushArgs& args) override {
    auto push = std::make_unique<GrpcPush>();
    push->context->set_deadline(absl::ToChronoTime(args.deadline));
    push->request =
        MakePushRequest(args.rank, args.incarnation, args.step, args.chunk,
                        ToProtoDType(args.dtype), args.payload, args.slot);
    return push;
  }

  void StartPush(PreparedPush* prepared, ReplyCallback done) override {
    auto* push = static_cast<GrpcPush*>(prepared);
    push->done = std::move(done);
    push->watch_id = Watch(cancel_, push->context);
    // The callback captures only the push and the token, so that it needs
    // no allocation of its own; the reply is handed over in gRPC's slices.
    raw_stub_.UnaryCall(
        push->context.get(), kPushMethod, grpc::StubOptions(), &push->request,
        &push->response, [push, token = cancel_](grpc::Status s) {
          Unwatch(token, push->watch_id);
          if (!s.ok()) {
            push->done(FromGrpcStatus(s), absl::InternalError("no reply"));
            return;
          }
          absl::StatusOr<WeightsView> reply = ParseWeightsReply(push->response);
          if (!reply.ok()) {
            push->done(absl::OkStatus(), reply.status());
            return;
          }
          push->done(absl::OkStatus(),
                     WeightsPieces{reply->version, reply->data});
        });
  }

 private:
  const std::string address_;
  CancelToken* const cancel_;  // Not owned; may be null.
  const bool client_tls_;      // The channel uses TLS.
  const std::unique_ptr<v1::ParameterServer::Stub> stub_;
  grpc::GenericStub raw_stub_;
};

}  // namespace

absl::Status CheckServerAddress(absl::string_view address) {
  for (absl::string_view scheme :
       {"unix:", "unix-abstract:", "dns:", "ipv4:", "ipv6:"}) {
    if (absl::StartsWith(address, scheme)) return absl::OkStatus();
  }
  const size_t colon = address.rfind(':');
  absl::string_view host = address.substr(0, colon);
  int port = 0;
  const bool bracketed = absl::StartsWith(host, "[") &&
                         absl::EndsWith(host, "]") && host.size() > 2;
  if (colon != absl::string_view::npos && !host.empty() &&
      (absl::StartsWith(host, "[") ? bracketed
                                   : !absl::StrContains(host, ':')) &&
      absl::SimpleAtoi(address.substr(colon + 1), &port) && port >= 1 &&
      port <= 65535) {
    return absl::OkStatus();
  }
  return absl::InvalidArgumentError(absl::StrCat(
      "server address \"", address,
      "\" is not host:port with a port from 1 to 65535 (\"[::1]:port\" for "
      "IPv6, or a gRPC target such as unix:PATH)"));
}

absl::StatusOr<std::vector<std::unique_ptr<ShardTransport>>>
MakeGrpcShardTransports(const std::vector<std::string>& servers,
                        const TlsOptions& tls, int max_message_bytes,
                        CancelToken* cancel) {
  grpc::ChannelArguments args;
  args.SetMaxReceiveMessageSize(max_message_bytes);
  args.SetMaxSendMessageSize(max_message_bytes);
  std::vector<std::unique_ptr<ShardTransport>> transports;
  for (const std::string& server : servers) {
    RETURN_IF_ERROR(CheckServerAddress(server));
    ASSIGN_OR_RETURN(std::shared_ptr<grpc::Channel> channel,
                     MakeChannel(server, tls, args));
    transports.push_back(std::make_unique<GrpcShardTransport>(
        server, channel, cancel, tls.ClientTls()));
  }
  return transports;
}

}  // namespace lockstep
