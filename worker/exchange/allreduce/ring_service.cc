#include "worker/exchange/allreduce/ring_service.h"

#include "common/rpc/grpc_status.h"

namespace lockstep {

grpc::ServerUnaryReactor* RingService::SendChunk(
    grpc::CallbackServerContext* context, const v1::RingChunk* request,
    v1::RingChunkAck* response) {
  if (absl::Status s = CheckAccess(authorizer_, *context, Access::kWorker,
                                   "Ring.SendChunk");
      !s.ok()) {
    grpc::ServerUnaryReactor* reactor = context->DefaultReactor();
    reactor->Finish(ToGrpcStatus(s));
    return reactor;
  }
  RingChunkView chunk;
  chunk.sender_rank = request->sender_rank();
  chunk.session = request->session();
  chunk.op = request->op();
  chunk.step = request->step();
  chunk.chunk = request->chunk();
  chunk.total_elements = request->total_elements();
  chunk.data = request->data();  // gRPC keeps the request until Finish.
  grpc::ServerUnaryReactor* reactor = context->DefaultReactor();
  sink_->OnChunk(chunk, [reactor](absl::Status status) {
    reactor->Finish(ToGrpcStatus(status));
  });
  return reactor;
}

}  // namespace lockstep
