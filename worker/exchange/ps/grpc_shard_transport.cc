#include "worker/exchange/ps/grpc_shard_transport.h"

#include <grpcpp/generic/generic_stub.h>
#include <grpcpp/grpcpp.h>

#include <utility>

#include "common/grpc_status.h"
#include "common/signature_proto.h"
#include "common/status_macros.h"
#include "common/tls.h"
#include "common/wire_dtype_proto.h"
#include "common/wire_format.h"
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

// Starts `call` with the asynchronous `method` of `stub`; once it completes
// the call is deleted, then `finish` gets the status and the response:
// nothing of the call is left when the caller's wait ends.
template <typename Request, typename Response, typename Finish>
void StartCall(v1::ParameterServer::Stub* stub,
               void (Async::*method)(grpc::ClientContext*, const Request*,
                                     Response*,
                                     std::function<void(grpc::Status)>),
               Call<Request, Response>* call, Finish finish) {
  (stub->async()->*method)(&call->context, &call->request, &call->response,
                           [call, finish = std::move(finish)](grpc::Status s) {
                             Response response = std::move(call->response);
                             delete call;
                             finish(FromGrpcStatus(s), response);
                           });
}

// A framed push and the reply it is answered with; the request refers to
// the payload in place.
struct GrpcPush final : ShardTransport::PreparedPush {
  grpc::ClientContext context;
  grpc::ByteBuffer request;
  grpc::ByteBuffer response;
  ShardTransport::ReplyCallback done;
};

class GrpcShardTransport final : public ShardTransport {
 public:
  GrpcShardTransport(std::string address,
                     const std::shared_ptr<grpc::Channel>& channel)
      : address_(std::move(address)),
        stub_(v1::ParameterServer::NewStub(channel)),
        raw_stub_(channel) {}

  std::string Describe() const override { return address_; }

  void Register(int rank, const ModelSignature& signature, absl::Time deadline,
                ShardRegistration* reply, StatusCallback done) override {
    auto* call = new Call<v1::RegisterRequest, v1::RegisterResponse>(deadline);
    call->context.set_wait_for_ready(true);  // Servers may still be starting.
    call->request.set_rank(rank);
    SignatureToProto(signature, call->request.mutable_signature());
    StartCall(stub_.get(), &Async::Register, call,
              [reply, done = std::move(done)](
                  absl::Status s, const v1::RegisterResponse& response) {
                if (s.ok()) {
                  reply->incarnation = response.incarnation();
                  reply->must_initialize = response.must_initialize();
                  reply->version = response.version();
                }
                done(std::move(s));
              });
  }

  void Initialize(int rank, int64_t incarnation, int chunk,
                  absl::Span<const float> weights, absl::Time deadline,
                  StatusCallback done) override {
    auto* call =
        new Call<v1::InitializeRequest, v1::InitializeResponse>(deadline);
    call->request.set_rank(rank);
    call->request.set_incarnation(incarnation);
    call->request.set_chunk(chunk);
    EncodeFloat32(weights, call->request.mutable_data());
    StartCall(stub_.get(), &Async::Initialize, call,
              [done = std::move(done)](absl::Status s,
                                       const v1::InitializeResponse&) {
                done(std::move(s));
              });
  }

  void Pull(const PullArgs& args, ReplyCallback done) override {
    auto* call = new Call<v1::PullRequest, v1::PullResponse>(args.deadline);
    call->request.set_chunk(args.chunk);
    call->request.set_min_version(args.min_version);
    call->request.set_exact(args.exact);
    call->request.set_rank(args.rank);
    call->request.set_incarnation(args.incarnation);
    call->request.set_dtype(ToProtoDType(args.dtype));
    StartCall(stub_.get(), &Async::Pull, call,
              [done = std::move(done)](absl::Status s,
                                       const v1::PullResponse& response) {
                const absl::string_view data = response.data();
                done(s, WeightsPieces{response.version(),
                                      absl::MakeConstSpan(&data, 1)});
              });
  }

  // A blocking call on the caller's thread: a worker that leaves may exit
  // at once, with no gRPC callback still running.
  void Leave(int rank, int64_t incarnation, absl::Time deadline,
             StatusCallback done) override {
    grpc::ClientContext context;
    context.set_deadline(absl::ToChronoTime(deadline));
    v1::LeaveRequest request;
    request.set_rank(rank);
    request.set_incarnation(incarnation);
    v1::LeaveResponse response;
    done(FromGrpcStatus(stub_->Leave(&context, request, &response)));
  }

  std::unique_ptr<PreparedPush> PreparePush(const PushArgs& args) override {
    auto push = std::make_unique<GrpcPush>();
    push->context.set_deadline(absl::ToChronoTime(args.deadline));
    push->request =
        MakePushRequest(args.rank, args.incarnation, args.step, args.chunk,
                        ToProtoDType(args.dtype), args.payload);
    return push;
  }

  void StartPush(PreparedPush* prepared, ReplyCallback done) override {
    auto* push = static_cast<GrpcPush*>(prepared);
    push->done = std::move(done);
    // The callback captures only the push, so that it needs no allocation
    // of its own; the reply is handed over in gRPC's slices.
    raw_stub_.UnaryCall(
        &push->context, kPushMethod, grpc::StubOptions(), &push->request,
        &push->response, [push](grpc::Status s) {
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
  const std::unique_ptr<v1::ParameterServer::Stub> stub_;
  grpc::GenericStub raw_stub_;
};

}  // namespace

absl::StatusOr<std::vector<std::unique_ptr<ShardTransport>>>
MakeGrpcShardTransports(const std::vector<std::string>& servers,
                        const TlsOptions& tls, int max_message_bytes) {
  grpc::ChannelArguments args;
  args.SetMaxReceiveMessageSize(max_message_bytes);
  args.SetMaxSendMessageSize(max_message_bytes);
  std::vector<std::unique_ptr<ShardTransport>> transports;
  for (const std::string& server : servers) {
    ASSIGN_OR_RETURN(std::shared_ptr<grpc::Channel> channel,
                     MakeChannel(server, tls, args));
    transports.push_back(std::make_unique<GrpcShardTransport>(server, channel));
  }
  return transports;
}

}  // namespace lockstep
