#include "server/coordination/coordination_service.h"

#include <algorithm>
#include <cstdint>
#include <string>
#include <utility>

#include "common/grpc_status.h"

namespace lockstep {
namespace {

// A Get that waits for its key. Exactly one of two things finishes it: the
// store's callback (the key appeared, or the store shut down) or OnCancel,
// whichever removes the waiter from the store first. Deletes itself when
// gRPC is done with it.
class WaitingGet final : public grpc::ServerUnaryReactor {
 public:
  WaitingGet(CoordinationStore* store, v1::GetResponse* response)
      : store_(store), response_(response) {}

  // Called once, by the handler, before gRPC can call OnCancel (which it
  // does only after the handler returns the reactor).
  void Start(const std::string& key) {
    waiter_ = store_->GetAsync(key, [this](absl::StatusOr<std::string> value) {
      if (value.ok()) response_->set_value(*std::move(value));
      Finish(ToGrpcStatus(value.status()));
    });
  }

  void OnCancel() override {
    if (waiter_ != 0 && store_->Cancel(waiter_)) {
      Finish(grpc::Status(grpc::StatusCode::CANCELLED,
                          "Get cancelled before its key appeared"));
    }
  }

  void OnDone() override { delete this; }

 private:
  CoordinationStore* const store_;   // Not owned.
  v1::GetResponse* const response_;  // Owned by gRPC; valid until OnDone.
  CoordinationStore::WaiterId waiter_ = 0;
};

// A JoinGroup waiting for its group to form; finished, like WaitingGet,
// by whichever of the rendezvous' callback and OnCancel comes first.
class WaitingJoin final : public grpc::ServerUnaryReactor {
 public:
  WaitingJoin(GroupRendezvous* groups, v1::JoinGroupResponse* response)
      : groups_(groups), response_(response) {}

  void Start(const v1::JoinGroupRequest& r) {
    GroupRendezvous::Request request;
    request.group = r.group();
    request.member = r.member();
    request.rank = r.rank();
    request.size = r.size();
    request.version = r.version();
    request.min_size = r.min_size();
    request.signature = r.signature();
    // Clamped before the conversion; Check refuses what is out of range.
    request.settle = absl::Milliseconds(std::clamp<int64_t>(
        r.settle_ms(), -1,
        absl::ToInt64Milliseconds(GroupRendezvous::kMaxSettle) + 1));
    waiter_ = groups_->Join(
        request, [this](absl::StatusOr<GroupRendezvous::Group> group) {
          if (group.ok()) {
            response_->set_generation(group->generation);
            response_->set_index(group->index);
            response_->set_size(static_cast<int32_t>(group->members.size()));
            for (int rank : group->members) response_->add_members(rank);
            response_->set_version(group->version);
            response_->set_state_needed(group->state_needed);
            response_->set_source_index(group->source_index);
          }
          Finish(ToGrpcStatus(group.status()));
        });
  }

  void OnCancel() override {
    if (waiter_ != 0 && groups_->Cancel(waiter_)) {
      Finish(grpc::Status(grpc::StatusCode::CANCELLED,
                          "JoinGroup cancelled before the group formed"));
    }
  }

  void OnDone() override { delete this; }

 private:
  GroupRendezvous* const groups_;          // Not owned.
  v1::JoinGroupResponse* const response_;  // Owned by gRPC; valid until OnDone.
  GroupRendezvous::WaiterId waiter_ = 0;
};

// A WatchGroup waiting for a joiner or a new generation.
class WaitingWatch final : public grpc::ServerUnaryReactor {
 public:
  WaitingWatch(GroupRendezvous* groups, v1::WatchGroupResponse* response)
      : groups_(groups), response_(response) {}

  void Start(const v1::WatchGroupRequest& r) {
    waiter_ = groups_->Watch(r.group(), r.generation(),
                             [this](absl::StatusOr<int> waiting) {
                               if (waiting.ok())
                                 response_->set_waiting(*waiting);
                               Finish(ToGrpcStatus(waiting.status()));
                             });
  }

  void OnCancel() override {
    if (waiter_ != 0 && groups_->Cancel(waiter_)) {
      Finish(grpc::Status(grpc::StatusCode::CANCELLED,
                          "WatchGroup cancelled before anyone joined"));
    }
  }

  void OnDone() override { delete this; }

 private:
  GroupRendezvous* const groups_;  // Not owned.
  v1::WatchGroupResponse* const
      response_;  // Owned by gRPC; valid until OnDone.
  GroupRendezvous::WaiterId waiter_ = 0;
};

// The reactor of a call refused by `status`.
grpc::ServerUnaryReactor* Refused(grpc::CallbackServerContext* context,
                                  const absl::Status& status) {
  grpc::ServerUnaryReactor* reactor = context->DefaultReactor();
  reactor->Finish(ToGrpcStatus(status));
  return reactor;
}

}  // namespace

grpc::ServerUnaryReactor* CoordinatorService::JoinGroup(
    grpc::CallbackServerContext* context, const v1::JoinGroupRequest* request,
    v1::JoinGroupResponse* response) {
  if (absl::Status s = CheckAccess(authorizer_, *context, Access::kWorker,
                                   "Coordinator.JoinGroup");
      !s.ok()) {
    return Refused(context, s);
  }
  auto* waiting = new WaitingJoin(groups_, response);
  waiting->Start(*request);
  return waiting;
}

grpc::ServerUnaryReactor* CoordinatorService::WatchGroup(
    grpc::CallbackServerContext* context, const v1::WatchGroupRequest* request,
    v1::WatchGroupResponse* response) {
  if (absl::Status s = CheckAccess(authorizer_, *context, Access::kWorker,
                                   "Coordinator.WatchGroup");
      !s.ok()) {
    return Refused(context, s);
  }
  auto* waiting = new WaitingWatch(groups_, response);
  waiting->Start(*request);
  return waiting;
}

grpc::ServerUnaryReactor* CoordinatorService::Set(
    grpc::CallbackServerContext* context, const v1::SetRequest* request,
    v1::SetResponse* response) {
  if (absl::Status s = CheckAccess(authorizer_, *context, Access::kWorker,
                                   "Coordinator.Set");
      !s.ok()) {
    return Refused(context, s);
  }
  absl::StatusOr<bool> created =
      store_->Set(request->key(), request->value(), request->if_absent());
  if (created.ok()) response->set_created(*created);
  grpc::ServerUnaryReactor* reactor = context->DefaultReactor();
  reactor->Finish(ToGrpcStatus(created.status()));
  return reactor;
}

grpc::ServerUnaryReactor* CoordinatorService::Get(
    grpc::CallbackServerContext* context, const v1::GetRequest* request,
    v1::GetResponse* response) {
  if (absl::Status s = CheckAccess(authorizer_, *context, Access::kWorker,
                                   "Coordinator.Get");
      !s.ok()) {
    return Refused(context, s);
  }
  if (request->no_wait()) {
    absl::StatusOr<std::string> value = store_->TryGet(request->key());
    if (value.ok()) response->set_value(*std::move(value));
    grpc::ServerUnaryReactor* reactor = context->DefaultReactor();
    reactor->Finish(ToGrpcStatus(value.status()));
    return reactor;
  }
  auto* waiting = new WaitingGet(store_, response);
  waiting->Start(request->key());
  return waiting;
}

}  // namespace lockstep
