#include "worker/exchange/allreduce/ring_connection.h"

#include <grpcpp/grpcpp.h>

#include <algorithm>
#include <climits>
#include <utility>

#include "absl/strings/str_cat.h"
#include "absl/time/clock.h"
#include "common/base/status_macros.h"
#include "common/rpc/grpc_status.h"
#include "common/security/grpc_limits.h"
#include "common/security/tls.h"
#include "common/wire/wire_codec.h"
#include "lockstep/v1/ring.pb.h"
#include "worker/exchange/allreduce/coordinator_client.h"

namespace lockstep {
namespace {

// gRPC's framing around a chunk's payload is far below this.
constexpr int64_t kMessageOverheadBytes = 64 << 10;

std::string HostPort(const std::string& host, int port) {
  const bool ipv6 = host.find(':') != std::string::npos && host[0] != '[';
  return ipv6 ? absl::StrCat("[", host, "]:", port)
              : absl::StrCat(host, ":", port);
}

std::string PeerKey(const AllReduceOptions& options, int rank) {
  return absl::StrCat(options.group, "/grpc-ring/peer/", rank);
}

// The record `rank` published, waiting for it until `deadline`.
absl::StatusOr<v1::RingPeer> ReadPeer(CoordinatorClient& coordinator,
                                      const AllReduceOptions& options, int rank,
                                      absl::Time deadline) {
  absl::StatusOr<std::string> value =
      coordinator.Get(PeerKey(options, rank), deadline);
  if (!value.ok()) {
    return absl::Status(
        value.status().code(),
        absl::StrCat("ring rendezvous of rank ", options.rank, " of ",
                     options.size, ": waiting for rank ", rank, ": ",
                     value.status().message()));
  }
  v1::RingPeer peer;
  if (!peer.ParseFromString(*value) || peer.address().empty() ||
      peer.session() == 0) {
    return absl::InternalError(
        absl::StrCat("malformed ring peer record for rank ", rank, " under \"",
                     PeerKey(options, rank), "\""));
  }
  return peer;
}

// One chunk to the right neighbour: an asynchronous Ring.SendChunk. gRPC
// uses the context, request and response until the completion callback
// returns, so the send must outlive it.
class GrpcRingSend final : public RingSend {
 public:
  explicit GrpcRingSend(v1::Ring::Stub* stub) : stub_(stub) {}

  void Start(const RingChunkHeader& header, absl::Span<const float> values,
             absl::Time deadline, Done done) override {
    request_.set_sender_rank(header.sender_rank);
    request_.set_session(header.session);
    request_.set_op(header.op);
    request_.set_step(header.step);
    request_.set_chunk(static_cast<int32_t>(header.chunk));
    request_.set_total_elements(header.total_elements);
    EncodeFloat32(values, request_.mutable_data());
    context_.set_deadline(absl::ToChronoTime(deadline));
    // Fail fast: the neighbour's service was up before it published its
    // address, so a refused connection means it went away (UNAVAILABLE),
    // not that it is still starting.
    context_.set_wait_for_ready(false);
    stub_->async()->SendChunk(
        &context_, &request_, &response_,
        [this, done = std::move(done)](grpc::Status status) {
          request_.clear_data();  // gRPC is done with it; free the copy now.
          done(FromGrpcStatus(status));  // The send may be gone after this.
        });
  }

  // TryCancel is safe before the call starts.
  void Cancel() override { context_.TryCancel(); }

 private:
  v1::Ring::Stub* const stub_;  // Not owned.
  grpc::ClientContext context_;
  v1::RingChunk request_;
  v1::RingChunkAck response_;
};

}  // namespace

RingConnection::RingConnection(const AllReduceOptions& options,
                               uint64_t session, RingChunkSink* sink,
                               std::unique_ptr<Authorizer> authorizer)
    : options_(options),
      max_chunk_bytes_(options.chunk_bytes == kAutoChunkBytes
                           ? kDefaultChunkBytes
                           : options.chunk_bytes),
      left_rank_((options.rank + options.size - 1) % options.size),
      right_rank_((options.rank + 1) % options.size),
      session_(session),
      authorizer_(std::move(authorizer)),
      service_(sink, authorizer_.get()) {}

RingConnection::~RingConnection() {
  if (server_ != nullptr) {
    server_->Shutdown(absl::ToChronoTime(absl::Now() + absl::Seconds(1)));
  }
}

std::unique_ptr<RingSend> RingConnection::NewSend() {
  return std::make_unique<GrpcRingSend>(right_stub_.get());
}

absl::Status RingConnection::Start() {
  ASSIGN_OR_RETURN(const int port, Listen());
  ASSIGN_OR_RETURN(const std::string right_address, Rendezvous(port));
  grpc::ChannelArguments args;
  args.SetMaxSendMessageSize(-1);
  // Peers present worker certificates for their own address: a server name
  // meant for the parameter servers does not apply.
  TlsOptions peer_tls = options_.tls;
  peer_tls.server_name.clear();
  ASSIGN_OR_RETURN(std::shared_ptr<grpc::Channel> channel,
                   MakeChannel(right_address, peer_tls, args));
  right_stub_ = v1::Ring::NewStub(std::move(channel));
  return absl::OkStatus();
}

absl::StatusOr<int> RingConnection::Listen() {
  const int64_t max_message =
      std::min<int64_t>(max_chunk_bytes_ + kMessageOverheadBytes, INT_MAX);
  ASSIGN_OR_RETURN(
      std::shared_ptr<grpc::ServerCredentials> credentials,
      MakeServerCredentials(options_.tls, HostPort(options_.host, 0)));
  grpc::ServerBuilder builder;
  int port = 0;
  builder.AddListeningPort(HostPort(options_.host, 0), credentials, &port);
  builder.SetMaxReceiveMessageSize(static_cast<int>(max_message));
  ServerLimits limits;
  // Room for the left neighbour's window several times over; a message
  // above max_message is buffered by gRPC before it is refused, and the
  // quota bounds that.
  limits.max_memory_bytes = std::max<int64_t>(
      int64_t{256} << 20, 4 * (options_.max_in_flight + 1) * max_message);
  ApplyServerLimits(limits, &builder);
  ListenExclusively(&builder);
  builder.RegisterService(&service_);
  server_ = builder.BuildAndStart();
  if (server_ == nullptr || port == 0) {
    return absl::UnavailableError(absl::StrCat(
        "rank ", options_.rank, " cannot listen on ", options_.host));
  }
  return port;
}

absl::StatusOr<std::string> RingConnection::Rendezvous(int port) {
  ASSIGN_OR_RETURN(
      std::unique_ptr<CoordinatorClient> coordinator,
      CoordinatorClient::Create(options_.coordinator, options_.tls));
  const absl::Time deadline = absl::Now() + options_.rendezvous_timeout;
  v1::RingPeer self;
  self.set_address(HostPort(options_.host, port));
  self.set_session(session_);
  RETURN_IF_ERROR(coordinator->Set(PeerKey(options_, options_.rank),
                                   self.SerializeAsString(), deadline));
  // Every rank, not just the neighbours: a missing rank then fails creation
  // everywhere rather than the first all-reduce somewhere.
  std::string right_address;
  for (int rank = 0; rank < options_.size; ++rank) {
    if (rank == options_.rank) continue;
    ASSIGN_OR_RETURN(const v1::RingPeer peer,
                     ReadPeer(*coordinator, options_, rank, deadline));
    if (rank == left_rank_) left_session_ = peer.session();
    if (rank == right_rank_) right_address = peer.address();
  }
  return right_address;
}

}  // namespace lockstep
