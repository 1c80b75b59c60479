#include "server/coordination/coordination_service.h"

#include <algorithm>
#include <cstdint>
#include <functional>
#include <string>
#include <utility>
#include <vector>

#include "absl/strings/str_cat.h"
#include "absl/time/clock.h"
#include "common/base/status_macros.h"
#include "common/rpc/grpc_status.h"

namespace lockstep {
namespace {

// A call that waits in the store or the rendezvous (a Get of a missing key,
// a JoinGroup, a WatchGroup). Exactly one of two things finishes it: the
// waiter's callback (it was answered, or the store shut down) or OnCancel,
// whichever removes the waiter first. Deletes itself when gRPC is done with
// it.
class WaitingCall final : public grpc::ServerUnaryReactor {
 public:
  // `cancel` withdraws a waiter by its id (true when it was still waiting);
  // `cancelled` is what the caller is told then.
  WaitingCall(std::function<bool(int64_t)> cancel, const char* cancelled)
      : cancel_(std::move(cancel)), cancelled_(cancelled) {}

  // The id the waiter got (0: it was answered at once). Called once, by
  // the handler, before gRPC can call OnCancel (which it does only after
  // the handler returns the reactor).
  void Waiting(int64_t id) { waiter_ = id; }

  void OnCancel() override {
    if (waiter_ != 0 && cancel_(waiter_)) {
      Finish(grpc::Status(grpc::StatusCode::CANCELLED, cancelled_));
    }
  }

  void OnDone() override { delete this; }

 private:
  const std::function<bool(int64_t)> cancel_;
  const char* const cancelled_;
  int64_t waiter_ = 0;
};

// The reactor of a call answered at once with `status` (a refusal, or
// the result).
grpc::ServerUnaryReactor* Answered(grpc::CallbackServerContext* context,
                                   const absl::Status& status) {
  grpc::ServerUnaryReactor* reactor = context->DefaultReactor();
  reactor->Finish(ToGrpcStatus(status));
  return reactor;
}

GroupRendezvous::Request FromProto(const v1::JoinGroupRequest& r) {
  GroupRendezvous::Request request;
  request.group = r.group();
  request.member = r.member();
  request.rank = r.rank();
  request.size = r.size();
  request.version = r.version();
  request.min_size = r.min_size();
  request.signature = r.signature();
  request.quorum = r.quorum();
  // Clamped before the conversion; the rendezvous refuses what is out of
  // range.
  request.settle = absl::Milliseconds(std::clamp<int64_t>(
      r.settle_ms(), -1,
      absl::ToInt64Milliseconds(GroupRendezvous::kMaxSettle) + 1));
  return request;
}

void ToProto(const GroupRendezvous::Group& group, v1::JoinGroupResponse* r) {
  r->set_generation(group.generation);
  r->set_index(group.index);
  r->set_size(static_cast<int32_t>(group.members.size()));
  for (int rank : group.members) r->add_members(rank);
  r->set_version(group.version);
  r->set_state_needed(group.state_needed);
  r->set_source_index(group.source_index);
}

}  // namespace

absl::Status CoordinatorService::Admit(
    const grpc::CallbackServerContext& context, const char* method) {
  RETURN_IF_ERROR(CheckAccess(authorizer_, context, Access::kWorker, method));
  if (contact_ != nullptr) contact_->Note(absl::Now());
  return absl::OkStatus();
}

grpc::ServerUnaryReactor* CoordinatorService::JoinGroup(
    grpc::CallbackServerContext* context, const v1::JoinGroupRequest* request,
    v1::JoinGroupResponse* response) {
  if (absl::Status s = Admit(*context, "Coordinator.JoinGroup"); !s.ok()) {
    return Answered(context, s);
  }
  auto* call = new WaitingCall(
      [groups = groups_](int64_t id) { return groups->Cancel(id); },
      "JoinGroup cancelled before the group formed");
  call->Waiting(groups_->Join(
      FromProto(*request),
      [call, response, store = store_,
       name = request->group()](absl::StatusOr<GroupRendezvous::Group> group) {
        if (group.ok()) {
          ToProto(*group, response);
          // The older generations' records are read by no one now.
          store->ForgetGenerationsBefore(name, group->generation);
        }
        call->Finish(ToGrpcStatus(group.status()));
      }));
  return call;
}

grpc::ServerUnaryReactor* CoordinatorService::WatchGroup(
    grpc::CallbackServerContext* context, const v1::WatchGroupRequest* request,
    v1::WatchGroupResponse* response) {
  if (absl::Status s = Admit(*context, "Coordinator.WatchGroup"); !s.ok()) {
    return Answered(context, s);
  }
  if (request->leaving()) {
    if (!request->has_rank()) {
      return Answered(context, absl::InvalidArgumentError(
                                   "a WatchGroup that leaves names its rank"));
    }
    groups_->Forget(request->group(), request->rank());
    response->set_waiting(0);
    return Answered(context, absl::OkStatus());
  }
  auto* call = new WaitingCall(
      [groups = groups_](int64_t id) { return groups->Cancel(id); },
      "WatchGroup cancelled before anyone joined");
  call->Waiting(groups_->Watch(
      request->group(), request->generation(),
      [call, response](absl::StatusOr<int> waiting) {
        if (waiting.ok()) response->set_waiting(*waiting);
        call->Finish(ToGrpcStatus(waiting.status()));
      },
      request->has_rank() ? request->rank() : -1, request->alive_only()));
  return call;
}

grpc::ServerUnaryReactor* CoordinatorService::Set(
    grpc::CallbackServerContext* context, const v1::SetRequest* request,
    v1::SetResponse* response) {
  if (absl::Status s = Admit(*context, "Coordinator.Set"); !s.ok()) {
    return Answered(context, s);
  }
  absl::StatusOr<bool> created =
      store_->Set(request->key(), request->value(), request->if_absent());
  if (created.ok()) response->set_created(*created);
  return Answered(context, created.status());
}

grpc::ServerUnaryReactor* CoordinatorService::Get(
    grpc::CallbackServerContext* context, const v1::GetRequest* request,
    v1::GetResponse* response) {
  if (absl::Status s = Admit(*context, "Coordinator.Get"); !s.ok()) {
    return Answered(context, s);
  }
  if (request->no_wait()) {
    absl::StatusOr<std::string> value = store_->TryGet(request->key());
    if (value.ok()) response->set_value(*std::move(value));
    return Answered(context, value.status());
  }
  auto* call = new WaitingCall(
      [store = store_](int64_t id) { return store->Cancel(id); },
      "Get cancelled before its key appeared");
  call->Waiting(store_->GetAsync(
      request->key(), [call, response](absl::StatusOr<std::string> value) {
        if (value.ok()) response->set_value(*std::move(value));
        call->Finish(ToGrpcStatus(value.status()));
      }));
  return call;
}

grpc::ServerUnaryReactor* CoordinatorService::ReportSteps(
    grpc::CallbackServerContext* context,
    const v1::ReportStepsRequest* request,
    v1::ReportStepsResponse* /*response*/) {
  if (absl::Status s = Admit(*context, "Coordinator.ReportSteps"); !s.ok()) {
    return Answered(context, s);
  }
  if (!reports_) {
    return Answered(context, absl::UnimplementedError(
                                 "this coordinator keeps no step reports"));
  }
  if (request->steps_size() > kMaxReports) {
    return Answered(context,
                    absl::InvalidArgumentError(absl::StrCat(
                        "ReportSteps carries ", request->steps_size(),
                        " steps; at most ", kMaxReports)));
  }
  std::vector<StepReport> reports;
  reports.reserve(request->steps_size());
  for (const v1::StepPhases& p : request->steps()) {
    StepReport r;
    r.step = p.step();
    r.input_us = p.input_us();
    r.compute_us = p.compute_us();
    r.push_us = p.push_us();
    r.wait_us = p.wait_us();
    reports.push_back(r);
  }
  return Answered(context, reports_(request->rank(), reports));
}

}  // namespace lockstep
