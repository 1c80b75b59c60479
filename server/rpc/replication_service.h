// The gRPC face of a primary shard's replication (proto/lockstep/v1/
// replication.proto): a standby's Follow long poll, handed to whatever the
// daemon set (server/daemon/replication_source.h). Only admins may follow:
// the answer is the whole model with its optimizer state. Until a source is
// set (a server without --replicas, or a standby not promoted yet) Follow
// answers FAILED_PRECONDITION. Thread-safe.
#ifndef LOCKSTEP_SERVER_RPC_REPLICATION_SERVICE_H_
#define LOCKSTEP_SERVER_RPC_REPLICATION_SERVICE_H_

#include <cstdint>
#include <functional>
#include <string>

#include "absl/base/thread_annotations.h"
#include "absl/status/statusor.h"
#include "absl/synchronization/mutex.h"
#include "common/security/authorizer.h"
#include "lockstep/v1/replication.grpc.pb.h"
#include "server/core/chunk_versions.h"

namespace lockstep {

// Holds a push's or pull's answer until a standby holds its version
// (ReplicationSource); ParameterServerService::SetReplyGate.
class ReplyGate {
 public:
  virtual ~ReplyGate() = default;
  virtual ChunkCallback Wrap(ChunkCallback done) = 0;
};

// One answer to a Follow (FollowResponse).
struct ReplicaUpdate {
  int64_t version = -1;
  int64_t sequence = 0;    // The checkpoint's (FollowResponse.sequence).
  std::string checkpoint;  // Encoded; empty: a heartbeat.
  bool job_done = false;
};

class ReplicationService final
    : public v1::Replication::WithCallbackMethod_Follow<
          v1::Replication::Service> {
 public:
  using Done = std::function<void(absl::StatusOr<ReplicaUpdate>)>;
  // Takes the sequence number of the state a follower holds (0: none) and
  // its name; answers `done` once.
  using FollowFn =
      std::function<void(int64_t held, const std::string& standby, Done done)>;

  // `authorizer` is not owned (null: everyone may call).
  explicit ReplicationService(const Authorizer* authorizer)
      : authorizer_(authorizer) {}

  void SetSource(FollowFn follow) ABSL_LOCKS_EXCLUDED(mu_);
  // Why Follow is refused while no source is set.
  void SetRefusal(std::string why) ABSL_LOCKS_EXCLUDED(mu_);

  grpc::ServerUnaryReactor* Follow(grpc::CallbackServerContext* context,
                                   const v1::FollowRequest* request,
                                   v1::FollowResponse* response) override;

 private:
  const Authorizer* const authorizer_;  // Not owned.
  absl::Mutex mu_;
  FollowFn follow_ ABSL_GUARDED_BY(mu_);
  std::string refusal_ ABSL_GUARDED_BY(mu_) =
      "this server keeps no standby: start it with --replicas=2";
};

}  // namespace lockstep

#endif  // LOCKSTEP_SERVER_RPC_REPLICATION_SERVICE_H_
