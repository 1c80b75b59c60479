// One rank's place in the grpc-ring all-reducer's gRPC network: the Ring
// service it hosts on options.host (RingService, delivering to a
// RingChunkSink), the rendezvous through the Coordinator, and the channel to
// its right neighbour, over which it sends chunks as a RingLink
// (ring_chunk.h).
//
// At Start every rank publishes its address and session under
// "<group>/grpc-ring/peer/<rank>" in the Coordinator and reads everyone's,
// so Start fails with DEADLINE_EXCEEDED on every rank when one never comes.
// The service is up before the address is published, so a neighbour's
// chunks may reach the sink before Start returns.
//
// Owns the service, its server, the authorizer that guards it and the
// channel. Start is called once, before anything else; after it the
// connection is immutable and NewSend is thread-safe. The sink must stop
// taking chunks (RingPipeline::Close) before the connection is destroyed,
// which stops the server.
#ifndef LOCKSTEP_WORKER_EXCHANGE_ALLREDUCE_RING_CONNECTION_H_
#define LOCKSTEP_WORKER_EXCHANGE_ALLREDUCE_RING_CONNECTION_H_

#include <cstdint>
#include <memory>
#include <string>

#include "absl/status/status.h"
#include "absl/status/statusor.h"
#include "common/security/authorizer.h"
#include "lockstep/v1/ring.grpc.pb.h"
#include "worker/exchange/allreduce/all_reducer.h"
#include "worker/exchange/allreduce/ring_chunk.h"
#include "worker/exchange/allreduce/ring_service.h"

namespace grpc {
class Server;
}  // namespace grpc

namespace lockstep {

class RingConnection final : public RingLink {
 public:
  // Rank options.rank of options.size, publishing `session`; received
  // chunks go to `sink` (not owned; it must outlive the connection).
  // `authorizer` guards the service; null: every caller is let in.
  RingConnection(const AllReduceOptions& options, uint64_t session,
                 RingChunkSink* sink, std::unique_ptr<Authorizer> authorizer);
  // Stops the service, giving calls in progress a second.
  ~RingConnection() override;

  RingConnection(const RingConnection&) = delete;
  RingConnection& operator=(const RingConnection&) = delete;

  // Starts the service, publishes this rank and reads the others, and opens
  // the channel to the right neighbour.
  absl::Status Start();

  // The left neighbour's session, once started.
  uint64_t left_session() const { return left_session_; }

  // RingLink: a chunk to the right neighbour. Once started.
  std::unique_ptr<RingSend> NewSend() override;

 private:
  // Starts the ring service on options_.host; returns its port.
  absl::StatusOr<int> Listen();
  // Publishes this rank's address and session, reads every other rank's,
  // keeps the left neighbour's session and returns the right's address.
  absl::StatusOr<std::string> Rendezvous(int port);

  const AllReduceOptions options_;
  // The largest chunk a call may use (its message-size limit).
  const int64_t max_chunk_bytes_;
  const int left_rank_;
  const int right_rank_;
  const uint64_t session_;
  uint64_t left_session_ = 0;  // Set by Start.

  const std::unique_ptr<Authorizer> authorizer_;
  RingService service_;
  std::unique_ptr<grpc::Server> server_;
  // To the right neighbour; set by Start, then only read.
  std::unique_ptr<v1::Ring::Stub> right_stub_;
};

}  // namespace lockstep

#endif  // LOCKSTEP_WORKER_EXCHANGE_ALLREDUCE_RING_CONNECTION_H_
