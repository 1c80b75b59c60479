// ShardTransport: how PsClient reaches one parameter-server shard.
//
// One interface with two implementations (as TensorFlow's WorkerInterface):
// the gRPC one (grpc_shard_transport.h, what the worker uses) and an
// in-process one that calls a ParameterServer object directly
// (in_process_shard_transport.h, for tests; it links the server core). The
// calls are the lockstep.v1 protocol's (server/core/parameter_server.h),
// asynchronous: each hands its outcome to a callback, on whatever thread
// completes it (gRPC's, or the caller's or another worker's in process).
// PsClient fans them out over shards and chunks and waits.
//
// A push is prepared (framed, on the thread that encodes it) and started
// later (when its shard's push window has room), so its payload -- the
// caller's gradient in fp32, else the encoded chunk -- travels without a
// copy. Every call has a deadline; the in-process transport answers at once
// or when the server's barrier does, and does not enforce it.
//
// Thread-safe: calls to one transport may come from several threads.
#ifndef LOCKSTEP_WORKER_EXCHANGE_PS_SHARD_TRANSPORT_H_
#define LOCKSTEP_WORKER_EXCHANGE_PS_SHARD_TRANSPORT_H_

#include <cstdint>
#include <functional>
#include <memory>
#include <string>
#include <vector>

#include "absl/status/status.h"
#include "absl/status/statusor.h"
#include "absl/strings/string_view.h"
#include "absl/time/time.h"
#include "absl/types/span.h"
#include "common/base/leave_note.h"
#include "common/model/model_signature.h"
#include "common/rpc/group_membership.h"
#include "common/wire/wire_codec.h"

namespace lockstep {

// A shard's answer to Register.
struct ShardRegistration {
  int64_t incarnation = 0;
  bool must_initialize = false;
  int64_t version = -1;
  // The versions of the shard's checkpoints, oldest first.
  std::vector<int64_t> checkpoint_versions;
};

// The weights a push or pull was answered with, in place: `data` (the
// payload in pieces, encoded as the request asked) is valid only during
// the callback that receives it.
struct WeightsPieces {
  int64_t version = 0;
  absl::Span<const absl::string_view> data;
};

// One push of one chunk.
struct PushArgs {
  int rank = 0;
  int64_t incarnation = 0;
  int64_t step = 0;
  int chunk = 0;
  WireDType dtype = WireDType::kFloat32;
  // Must stay alive and unchanged until the push's callback has run.
  absl::string_view payload;
  absl::Time deadline;
  PushSlot slot;  // An elastic job's group generation and batch shard.
};

// One pull of one chunk.
struct PullArgs {
  int rank = 0;
  int64_t incarnation = 0;
  int chunk = 0;
  int64_t min_version = 0;
  bool exact = false;
  WireDType dtype = WireDType::kFloat32;
  absl::Time deadline;
};

class ShardTransport {
 public:
  using StatusCallback = std::function<void(absl::Status)>;
  // `status`: the call's own outcome (not OK: the shard refused it or could
  // not be reached); `reply`: when it is OK, the reply parsed or why it
  // did not parse.
  using ReplyCallback = std::function<void(
      const absl::Status& status, const absl::StatusOr<WeightsPieces>& reply)>;

  // A push framed by PreparePush and not yet started.
  class PreparedPush {
   public:
    virtual ~PreparedPush() = default;
  };

  virtual ~ShardTransport() = default;

  // Where the shard is, for errors ("host:port").
  virtual std::string Describe() const = 0;

  // Joins as `rank`; waits for a shard that is not up yet until `deadline`.
  // `reply` is filled before `done` runs with OK.
  virtual void Register(int rank, const ModelSignature& signature,
                        absl::Time deadline, ShardRegistration* reply,
                        StatusCallback done) = 0;
  // Stores `weights` as chunk `chunk` of version 0. `weights` must stay
  // alive until `done` runs.
  virtual void Initialize(int rank, int64_t incarnation, int chunk,
                          absl::Span<const float> weights, absl::Time deadline,
                          StatusCallback done) = 0;
  virtual void Pull(const PullArgs& args, ReplyCallback done) = 0;
  // Done may run before Leave returns (gRPC's blocks: the process may exit
  // right after).
  virtual void Leave(int rank, int64_t incarnation, const LeaveNote& note,
                     absl::Time deadline, StatusCallback done) = 0;
  // Rank `rank`'s `values` for its average round `round` (shard 0 only:
  // server/core/metric_rounds.h); `mean` is filled before `done` runs with
  // OK. A blocking call on the caller's thread, like Leave.
  virtual void Average(int rank, int64_t incarnation, int64_t round,
                       const std::string& name, absl::Span<const double> values,
                       absl::Time deadline, std::vector<double>* mean,
                       StatusCallback done) = 0;

  // Asks the shard, seen at version `from`, to go back to its checkpoint
  // of version `to` (StepBackRequest in the proto). A blocking call on
  // the caller's thread, like Leave. Transports without checkpoints
  // answer UNIMPLEMENTED.
  virtual void StepBack(int rank, int64_t incarnation, int64_t from, int64_t to,
                        absl::Time deadline, StatusCallback done) {
    done(absl::UnimplementedError("this transport keeps no checkpoints"));
  }

  // After a Register that found no server in time: FAILED_PRECONDITION
  // when the shard's connection fails because a TLS handshake was refused
  // (IsTlsRefusal, common/rpc/grpc_status.h: a certificate not accepted,
  // which retrying will not change), else OK. Asks once, without waiting
  // for a connection, for at most `timeout`.
  virtual absl::Status CheckTlsRefusal(absl::Duration timeout) {
    return absl::OkStatus();
  }

  // Frames `args`'s push; the result stays alive until its callback ran.
  virtual std::unique_ptr<PreparedPush> PreparePush(const PushArgs& args) = 0;
  // Sends a push PreparePush made here; `done` gets the reply.
  virtual void StartPush(PreparedPush* push, ReplyCallback done) = 0;
};

}  // namespace lockstep

#endif  // LOCKSTEP_WORKER_EXCHANGE_PS_SHARD_TRANSPORT_H_
