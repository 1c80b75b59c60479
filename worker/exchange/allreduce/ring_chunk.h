// What the parts of the grpc-ring all-reducer (ring_all_reducer.h) hand each
// other, free of gRPC and protobuf: a chunk's header and payload, the
// receiving end (RingChunkSink: RingPipeline, fed by RingService or a test)
// and the sending end (RingLink: RingConnection's channel to the right
// neighbour, or a test's in-process link).
#ifndef LOCKSTEP_WORKER_EXCHANGE_ALLREDUCE_RING_CHUNK_H_
#define LOCKSTEP_WORKER_EXCHANGE_ALLREDUCE_RING_CHUNK_H_

#include <cstdint>
#include <functional>
#include <memory>

#include "absl/status/status.h"
#include "absl/strings/string_view.h"
#include "absl/time/time.h"
#include "absl/types/span.h"

namespace lockstep {

// Which chunk of which all-reduce a message is, and from whom; the fields
// are RingChunk's (proto/lockstep/v1/ring.proto) less the payload.
struct RingChunkHeader {
  int sender_rank = 0;
  uint64_t session = 0;
  int64_t op = 0;
  int step = 0;
  int64_t chunk = 0;
  int64_t total_elements = 0;
};

// One received chunk.
struct RingChunkView : RingChunkHeader {
  absl::string_view data;  // fp32 bytes, valid until `done` is called.
};

// Where received chunks go.
class RingChunkSink {
 public:
  using Done = std::function<void(absl::Status)>;
  virtual ~RingChunkSink() = default;
  // Uses `chunk` and then calls `done` exactly once, on any thread, at once
  // or later; its status is the RPC's.
  virtual void OnChunk(const RingChunkView& chunk, Done done) = 0;
};

// One outgoing chunk, made before it starts so that it can be cancelled at
// any time. Thread-safe: Cancel may race with Start.
class RingSend {
 public:
  using Done = std::function<void(absl::Status)>;
  virtual ~RingSend() = default;
  // Sends `values` (copied before Start returns) under `header` until
  // `deadline`; calls `done` exactly once, on any thread, with the
  // receiver's answer or the transport's error (UNAVAILABLE when the
  // receiver is gone). Called once.
  virtual void Start(const RingChunkHeader& header,
                     absl::Span<const float> values, absl::Time deadline,
                     Done done) = 0;
  // Ends the send early with CANCELLED if it has not finished; safe before
  // Start (the send then fails when it starts) and after it finished.
  virtual void Cancel() = 0;
};

// The way to the right neighbour. Thread-safe.
class RingLink {
 public:
  virtual ~RingLink() = default;
  virtual std::unique_ptr<RingSend> NewSend() = 0;
};

}  // namespace lockstep

#endif  // LOCKSTEP_WORKER_EXCHANGE_ALLREDUCE_RING_CHUNK_H_
