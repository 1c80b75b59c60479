// The gRPC face of a ring all-reducer's receiving end: the Ring service of
// proto/lockstep/v1/ring.proto over the callback API.
//
// SendChunk hands the chunk, still in gRPC's request, to a RingChunkSink
// (ring_chunk.h) and returns without waiting; the sink answers through
// `done` once it has used the payload, which may be later (a chunk of an
// all-reduce the receiver has not started yet is held until it does). The
// Authorizer (common/security/authorizer.h) is asked first: SendChunk is a worker
// RPC. Protobuf types stop here. Thread-safe if the sink is.
#ifndef LOCKSTEP_WORKER_EXCHANGE_ALLREDUCE_RING_SERVICE_H_
#define LOCKSTEP_WORKER_EXCHANGE_ALLREDUCE_RING_SERVICE_H_

#include "common/security/authorizer.h"
#include "lockstep/v1/ring.grpc.pb.h"
#include "worker/exchange/allreduce/ring_chunk.h"

namespace lockstep {

class RingService final : public v1::Ring::CallbackService {
 public:
  // `sink` and `authorizer` are not owned and must outlive the service's
  // server; a null authorizer lets every caller in.
  explicit RingService(RingChunkSink* sink,
                       const Authorizer* authorizer = nullptr)
      : sink_(sink), authorizer_(authorizer) {}

  grpc::ServerUnaryReactor* SendChunk(grpc::CallbackServerContext* context,
                                      const v1::RingChunk* request,
                                      v1::RingChunkAck* response) override;

 private:
  RingChunkSink* const sink_;           // Not owned.
  const Authorizer* const authorizer_;  // Not owned; may be null.
};

}  // namespace lockstep

#endif  // LOCKSTEP_WORKER_EXCHANGE_ALLREDUCE_RING_SERVICE_H_
