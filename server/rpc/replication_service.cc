#include "server/rpc/replication_service.h"

#include <utility>

#include "common/rpc/grpc_status.h"

namespace lockstep {

void ReplicationService::SetSource(FollowFn follow) {
  absl::MutexLock lock(&mu_);
  follow_ = std::move(follow);
}

void ReplicationService::SetRefusal(std::string why) {
  absl::MutexLock lock(&mu_);
  refusal_ = std::move(why);
}

grpc::ServerUnaryReactor* ReplicationService::Follow(
    grpc::CallbackServerContext* context, const v1::FollowRequest* request,
    v1::FollowResponse* response) {
  grpc::ServerUnaryReactor* reactor = context->DefaultReactor();
  if (absl::Status s =
          CheckAccess(authorizer_, *context, Access::kAdmin, "Follow");
      !s.ok()) {
    reactor->Finish(ToGrpcStatus(s));
    return reactor;
  }
  FollowFn follow;
  std::string refusal;
  {
    absl::MutexLock lock(&mu_);
    follow = follow_;
    refusal = refusal_;
  }
  if (!follow) {
    reactor->Finish(ToGrpcStatus(absl::FailedPreconditionError(refusal)));
    return reactor;
  }
  follow(request->held_sequence(), request->standby(),
         [reactor, response](absl::StatusOr<ReplicaUpdate> update) {
           if (!update.ok()) {
             reactor->Finish(ToGrpcStatus(update.status()));
             return;
           }
           response->set_version(update->version);
           response->set_sequence(update->sequence);
           response->set_checkpoint(std::move(update->checkpoint));
           response->set_job_done(update->job_done);
           reactor->Finish(grpc::Status::OK);
         });
  return reactor;
}

}  // namespace lockstep
