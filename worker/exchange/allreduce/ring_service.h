// The gRPC face of a ring all-reducer's receiving end: the Ring service of
// proto/lockstep/v1/ring.proto over the callback API.
//
// SendChunk hands the chunk, still in gRPC's request, to a RingChunkSink and
// returns without waiting; the sink answers through `done` once it has used
// the payload, which may be later (a chunk of an all-reduce the receiver has
// not started yet is held until it does). The Authorizer
// (common/security/authorizer.h) is asked first: SendChunk is a worker RPC. Protobuf
// types stop here. Thread-safe if the sink is.
#ifndef LOCKSTEP_WORKER_EXCHANGE_ALLREDUCE_RING_SERVICE_H_
#define LOCKSTEP_WORKER_EXCHANGE_ALLREDUCE_RING_SERVICE_H_

#include <cstdint>
#include <functional>

#include "absl/status/status.h"
#include "absl/strings/string_view.h"
#include "common/security/authorizer.h"
#include "lockstep/v1/ring.grpc.pb.h"

namespace lockstep {

// One received chunk; the fields are RingChunk's.
struct RingChunkView {
  int sender_rank = 0;
  uint64_t session = 0;
  int64_t op = 0;
  int step = 0;
  int64_t chunk = 0;
  int64_t total_elements = 0;
  absl::string_view data;  // fp32 bytes, valid until `done` is called.
};

// Where RingService delivers chunks.
class RingChunkSink {
 public:
  using Done = std::function<void(absl::Status)>;
  virtual ~RingChunkSink() = default;
  // Uses `chunk` and then calls `done` exactly once, on any thread, at once
  // or later; its status is the RPC's.
  virtual void OnChunk(const RingChunkView& chunk, Done done) = 0;
};

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
