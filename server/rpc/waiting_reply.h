// The reactor of a Push or Pull that may wait at a chunk's barrier (or for
// a version), and the callback that answers it with the chunk's weights.
//
// Exactly one of two things finishes the call, whichever comes first: the
// core's answer (the callback) or the caller giving up (OnCancel: its
// deadline passed, it cancelled, or its connection went). A call the caller
// gave up is finished at once with CANCELLED, so the server holds no call,
// response buffer or HTTP/2 stream for it while the step stays open; the
// callback the core still holds becomes a no-op (it shares a small state
// with the reactor, not the reactor itself, which is deleted when gRPC is
// done with it). What the core counted stays counted: a push's gradient is
// summed when it arrives (see docs/faults.md, Known gaps).
//
// WaitingCalls counts the calls now waiting and those their callers gave
// up, for GetStatus (ServerCounters.calls_waiting, waits_cancelled).
#ifndef LOCKSTEP_SERVER_RPC_WAITING_REPLY_H_
#define LOCKSTEP_SERVER_RPC_WAITING_REPLY_H_

#include <grpcpp/grpcpp.h>

#include <atomic>
#include <cstdint>
#include <memory>

#include "common/wire/wire_codec.h"
#include "server/core/parameter_server.h"

namespace lockstep {

// Thread-safe counters shared by the service and its calls.
struct WaitingCalls {
  std::atomic<int64_t> waiting{0};    // Calls not finished yet.
  std::atomic<int64_t> cancelled{0};  // Finished because the caller gave up.
};

class WaitingReply final : public grpc::ServerUnaryReactor {
 public:
  // `core`, `response` and `calls` are not owned; `core` and `calls`
  // outlive every call (the service owns them), `response` lives until
  // OnDone.
  WaitingReply(ParameterServer* core, WireDType dtype,
               grpc::ByteBuffer* response, WaitingCalls* calls);

  // The callback that finishes the call with the core's answer, unless
  // the caller gave it up first. Call once, before returning the reactor.
  ChunkCallback Answer();

  void OnCancel() override;
  void OnDone() override;

 private:
  struct Shared;
  const std::shared_ptr<Shared> shared_;
  WaitingCalls* const calls_;
};

}  // namespace lockstep

#endif  // LOCKSTEP_SERVER_RPC_WAITING_REPLY_H_
