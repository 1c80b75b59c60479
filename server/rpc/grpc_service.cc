#include "server/rpc/grpc_service.h"

#include "absl/strings/str_cat.h"
#include "common/model/signature_limits.h"
#include "common/model/signature_proto.h"
#include "common/rpc/grpc_status.h"
#include "common/rpc/wire_format.h"
#include "common/wire/wire_codec.h"
#include "common/wire/wire_dtype_proto.h"

namespace lockstep {
namespace {

grpc::ServerUnaryReactor* FinishWith(grpc::CallbackServerContext* context,
                                     const absl::Status& status) {
  grpc::ServerUnaryReactor* reactor = context->DefaultReactor();
  reactor->Finish(ToGrpcStatus(status));
  return reactor;
}

// `status` (and the service's `calls`) as a StatusResponse.
void FillStatus(const ServerStatus& status, const WaitingCalls& calls,
                v1::StatusResponse* response) {
  response->set_version(status.version);
  response->set_step(status.version);
  response->set_num_workers(status.num_workers);
  response->set_num_chunks(status.num_chunks);
  response->set_server_incarnation(status.server_incarnation);
  for (int r : status.registered_ranks) response->add_registered_ranks(r);
  for (int r : status.pushed_ranks) response->add_pushed_ranks(r);
  for (int r : status.finished_ranks) response->add_finished_ranks(r);
  if (status.signature.has_value()) {
    SignatureToProto(*status.signature, response->mutable_signature());
  }
  response->set_shard(status.shard);
  response->set_num_shards(status.num_shards);
  const ServerCounters& c = status.counters;
  v1::ServerCounters* counters = response->mutable_counters();
  counters->set_pushes_accepted(c.pushes_accepted);
  counters->set_pushes_refused(c.pushes_refused);
  counters->set_chunk_steps(c.chunk_steps);
  counters->set_accumulate_seconds(c.accumulate_seconds);
  counters->set_apply_seconds(c.apply_seconds);
  counters->set_barrier_wait_seconds(c.barrier_wait_seconds);
  counters->set_bytes_received(c.bytes_received);
  counters->set_bytes_sent(c.bytes_sent);
  counters->set_pushes_dropped_late(c.pushes_dropped_late);
  counters->set_calls_waiting(calls.waiting.load(std::memory_order_relaxed));
  counters->set_waits_cancelled(
      calls.cancelled.load(std::memory_order_relaxed));
  for (const auto& [code, n] : c.pushes_refused_by_code) {
    (*counters
          ->mutable_pushes_refused_by_code())[absl::StatusCodeToString(code)] =
        n;
  }
  response->set_server_time_unix_micros(absl::ToUnixMicros(status.now));
  for (const WorkerActivity& a : status.workers) {
    v1::WorkerActivity* w = response->add_workers();
    w->set_rank(a.rank);
    w->set_last_contact_unix_micros(a.last_contact == absl::InfinitePast()
                                        ? 0
                                        : absl::ToUnixMicros(a.last_contact));
    w->set_last_step(a.last_step);
    w->set_last_step_seconds(absl::ToDoubleSeconds(a.last_step_time));
    v1::StepWindow* to = w->mutable_window();  // lockstep_ctl stragglers
    to->set_late_steps(a.window.late_steps);
    to->set_lateness_seconds(absl::ToDoubleSeconds(a.window.lateness));
    to->set_timed_steps(a.window.timed_steps);
    to->set_step_seconds(absl::ToDoubleSeconds(a.window.step_time));
    to->set_reports(a.window.reports);
    to->set_input_seconds(absl::ToDoubleSeconds(a.window.input));
    to->set_compute_seconds(absl::ToDoubleSeconds(a.window.compute));
    to->set_push_seconds(absl::ToDoubleSeconds(a.window.push));
    to->set_wait_seconds(absl::ToDoubleSeconds(a.window.wait));
  }
}

}  // namespace

grpc::ServerUnaryReactor* ParameterServerService::Register(
    grpc::CallbackServerContext* context, const v1::RegisterRequest* request,
    v1::RegisterResponse* response) {
  if (absl::Status s =
          CheckAccess(authorizer_, *context, Access::kWorker, "Register");
      !s.ok()) {
    return FinishWith(context, s);
  }
  absl::StatusOr<ModelSignature> parsed =
      SignatureFromProto(request->signature());
  if (!parsed.ok()) return FinishWith(context, parsed.status());
  const ModelSignature& signature = *parsed;
  // Bounded before the core allocates weights and state for the model.
  if (absl::Status s = ValidateSignature(signature, limits_); !s.ok()) {
    return FinishWith(context, s);
  }
  grpc::ServerUnaryReactor* reactor = context->DefaultReactor();
  {
    absl::MutexLock lock(&gate_mu_);
    if (registration_held_ && !held_refusal_.empty()) {
      reactor->Finish(ToGrpcStatus(absl::UnavailableError(held_refusal_)));
      return reactor;
    }
    if (registration_held_) {  // A checkpoint is being restored.
      held_.push_back(HeldRegistration{
          [this, rank = request->rank(), signature, response, reactor]() {
            DoRegister(rank, signature, response, reactor);
          },
          reactor});
      return reactor;
    }
  }
  DoRegister(request->rank(), signature, response, reactor);
  return reactor;
}

void ParameterServerService::DoRegister(int rank,
                                        const ModelSignature& signature,
                                        v1::RegisterResponse* response,
                                        grpc::ServerUnaryReactor* reactor) {
  absl::StatusOr<Registration> reg = core_->Register(rank, signature);
  if (reg.ok()) {
    response->set_incarnation(reg->incarnation);
    response->set_must_initialize(reg->must_initialize);
    response->set_version(reg->version);
    response->set_server_incarnation(reg->server_incarnation);
    if (checkpoints_.versions) {
      for (int64_t v : checkpoints_.versions()) {
        response->add_checkpoint_versions(v);
      }
    }
  }
  reactor->Finish(ToGrpcStatus(reg.status()));
}

void ParameterServerService::HoldRegistration() {
  absl::MutexLock lock(&gate_mu_);
  registration_held_ = true;
}

void ParameterServerService::RefuseHeldRegistrations(std::string why) {
  std::vector<HeldRegistration> refused;
  {
    absl::MutexLock lock(&gate_mu_);
    held_refusal_ = std::move(why);
    if (!held_refusal_.empty()) refused.swap(held_);
    why = held_refusal_;
  }
  for (HeldRegistration& h : refused) {
    h.reactor->Finish(ToGrpcStatus(absl::UnavailableError(why)));
  }
}

void ParameterServerService::OpenRegistration() {
  std::vector<HeldRegistration> held;
  {
    absl::MutexLock lock(&gate_mu_);
    registration_held_ = false;
    held_refusal_.clear();
    held.swap(held_);
  }
  for (HeldRegistration& h : held) h.run();
}

grpc::ServerUnaryReactor* ParameterServerService::Initialize(
    grpc::CallbackServerContext* context, const v1::InitializeRequest* request,
    v1::InitializeResponse* response) {
  if (absl::Status s =
          CheckAccess(authorizer_, *context, Access::kWorker, "Initialize");
      !s.ok()) {
    return FinishWith(context, s);
  }
  absl::StatusOr<int64_t> version =
      core_->Initialize(request->rank(), request->incarnation(),
                        request->chunk(), request->data());
  if (version.ok()) response->set_version(*version);
  return FinishWith(context, version.status());
}

grpc::ServerUnaryReactor* ParameterServerService::Push(
    grpc::CallbackServerContext* context, const grpc::ByteBuffer* request,
    grpc::ByteBuffer* response) {
  if (absl::Status s =
          CheckAccess(authorizer_, *context, Access::kWorker, "Push");
      !s.ok()) {
    return FinishWith(context, s);
  }
  absl::StatusOr<PushView> push = ParsePushRequest(*request);
  if (!push.ok()) return FinishWith(context, push.status());
  absl::StatusOr<WireDType> dtype =
      FromProtoDType(static_cast<v1::DType>(push->dtype));
  if (!dtype.ok()) return FinishWith(context, dtype.status());
  auto* reactor = new WaitingReply(core_, *dtype, response, &waiting_calls_);
  // The core sums the payload from the received slices before it returns.
  core_->Push(push->rank, push->incarnation, push->step, push->chunk, *dtype,
              push->data, Gated(reactor->Answer()),
              PushSlot{push->group_generation, push->batch_shard,
                       push->report});
  // The push may now wait for the barrier, but its gradient is summed:
  // release the received slices rather than hold every waiting worker's
  // chunk until the step closes (memory O(model), not O(workers x model)).
  push->data.clear();
  push->slices.clear();
  const_cast<grpc::ByteBuffer*>(request)->Clear();
  return reactor;
}

grpc::ServerUnaryReactor* ParameterServerService::Pull(
    grpc::CallbackServerContext* context, const grpc::ByteBuffer* request,
    grpc::ByteBuffer* response) {
  if (absl::Status s =
          CheckAccess(authorizer_, *context, Access::kWorker, "Pull");
      !s.ok()) {
    return FinishWith(context, s);
  }
  grpc::Slice bytes;
  v1::PullRequest pull;
  if (!request->DumpToSingleSlice(&bytes).ok() ||
      !pull.ParseFromArray(bytes.begin(), static_cast<int>(bytes.size()))) {
    return FinishWith(context,
                      absl::InvalidArgumentError("malformed PullRequest"));
  }
  absl::StatusOr<WireDType> dtype = FromProtoDType(pull.dtype());
  if (!dtype.ok()) return FinishWith(context, dtype.status());
  auto* reactor = new WaitingReply(core_, *dtype, response, &waiting_calls_);
  core_->Pull(pull.rank(), pull.incarnation(), pull.chunk(), pull.min_version(),
              pull.exact(), Gated(reactor->Answer()));
  return reactor;
}

grpc::ServerUnaryReactor* ParameterServerService::Leave(
    grpc::CallbackServerContext* context, const v1::LeaveRequest* request,
    v1::LeaveResponse* response) {
  if (absl::Status s =
          CheckAccess(authorizer_, *context, Access::kWorker, "Leave");
      !s.ok()) {
    return FinishWith(context, s);
  }
  LeaveNote note;
  switch (request->reason()) {
    case v1::LEAVE_REASON_FINISHED:
      note.reason = LeaveReason::kFinished;
      break;
    case v1::LEAVE_REASON_STOPPED:
      note.reason = LeaveReason::kStopped;
      break;
    case v1::LEAVE_REASON_FAILED:
      note.reason = LeaveReason::kFailed;
      break;
    default:  // Unspecified, or a reason newer than this server.
      break;
  }
  note.detail = std::string(request->detail().substr(0, kMaxLeaveDetailBytes));
  return FinishWith(
      context, core_->Leave(request->rank(), request->incarnation(), note));
}

grpc::ServerUnaryReactor* ParameterServerService::Average(
    grpc::CallbackServerContext* context, const v1::AverageRequest* request,
    v1::AverageResponse* response) {
  if (absl::Status s =
          CheckAccess(authorizer_, *context, Access::kWorker, "Average");
      !s.ok()) {
    return FinishWith(context, s);
  }
  grpc::ServerUnaryReactor* reactor = context->DefaultReactor();
  core_->Average(
      request->rank(), request->incarnation(), request->round(),
      request->name(), {request->values().begin(), request->values().end()},
      [reactor, response](absl::StatusOr<std::vector<double>> mean) {
        if (!mean.ok()) return reactor->Finish(ToGrpcStatus(mean.status()));
        response->mutable_values()->Assign(mean->begin(), mean->end());
        reactor->Finish(grpc::Status::OK);
      });
  return reactor;
}

grpc::ServerUnaryReactor* ParameterServerService::GetStatus(
    grpc::CallbackServerContext* context, const v1::StatusRequest* request,
    v1::StatusResponse* response) {
  if (absl::Status s =
          CheckAccess(authorizer_, *context, Access::kRead, "GetStatus");
      !s.ok()) {
    return FinishWith(context, s);
  }
  if (request->wait_ms() <= 0) {
    FillStatus(core_->GetStatus(), waiting_calls_, response);
    return FinishWith(context, absl::OkStatus());
  }
  // A long poll: answered with the status of the moment it ends.
  grpc::ServerUnaryReactor* reactor = context->DefaultReactor();
  status_waits_.Hold(absl::Milliseconds(request->wait_ms()),
                     [core = core_, calls = &waiting_calls_, response,
                      reactor] {
                       FillStatus(core->GetStatus(), *calls, response);
                       reactor->Finish(grpc::Status::OK);
                     });
  return reactor;
}

grpc::ServerUnaryReactor* ParameterServerService::SaveCheckpoint(
    grpc::CallbackServerContext* context,
    const v1::SaveCheckpointRequest* request,
    v1::SaveCheckpointResponse* response) {
  if (absl::Status s =
          CheckAccess(authorizer_, *context, Access::kAdmin, "SaveCheckpoint");
      !s.ok()) {
    return FinishWith(context, s);
  }
  if (!save_checkpoint_) {
    return FinishWith(context, absl::FailedPreconditionError(
                                   "this server has nowhere to save: no "
                                   "checkpoint directory, no weights file"));
  }
  if (core_->GetStatus().OwnsNoChunk()) {
    // Nothing to save, and nothing lost: no path, version -1.
    response->set_version(-1);
    return FinishWith(context, absl::OkStatus());
  }
  grpc::ServerUnaryReactor* reactor = context->DefaultReactor();
  // Writing takes disk time: off gRPC's threads, one at a time, on the
  // service's own thread (joined before the server goes: StopSaving).
  const bool taken = saves_.Submit([this, reactor, response]() {
    absl::StatusOr<Saved> saved = save_checkpoint_();
    if (saved.ok()) {
      response->set_path(saved->checkpoint);
      response->set_weights_file(saved->weights_file);
      response->set_version(saved->version);
    }
    reactor->Finish(ToGrpcStatus(saved.status()));
  });
  if (!taken) {
    reactor->Finish(ToGrpcStatus(
        saving_stopped_
            ? absl::UnavailableError("the server is stopping")
            : absl::ResourceExhaustedError(absl::StrCat(
                  "a checkpoint is being written and ", kMaxWaitingSaves,
                  " more requests wait; try again later"))));
  }
  return reactor;
}

grpc::ServerUnaryReactor* ParameterServerService::StepBack(
    grpc::CallbackServerContext* context, const v1::StepBackRequest* request,
    v1::StepBackResponse* response) {
  if (absl::Status s =
          CheckAccess(authorizer_, *context, Access::kWorker, "StepBack");
      !s.ok()) {
    return FinishWith(context, s);
  }
  if (!checkpoints_.step_back) {
    return FinishWith(context, absl::FailedPreconditionError(
                                   "this shard keeps no checkpoints (no "
                                   "--checkpoint_dir): it cannot step back"));
  }
  grpc::ServerUnaryReactor* reactor = context->DefaultReactor();
  // It reads a checkpoint file: off gRPC's threads, and never while one is
  // being written.
  const int rank = request->rank();
  const int64_t incarnation = request->incarnation();
  const int64_t from = request->from_version();
  const int64_t to = request->to_version();
  const bool taken = saves_.Submit([=]() {
    absl::StatusOr<int64_t> version =
        checkpoints_.step_back(rank, incarnation, from, to);
    if (version.ok()) response->set_version(*version);
    reactor->Finish(ToGrpcStatus(version.status()));
  });
  if (!taken) {
    reactor->Finish(ToGrpcStatus(absl::UnavailableError(
        saving_stopped_ ? "the server is stopping"
                        : "the shard is busy writing checkpoints; try again")));
  }
  return reactor;
}

}  // namespace lockstep
