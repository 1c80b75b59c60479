#include "worker/exchange/allreduce/coordinator_client.h"

#include <grpcpp/grpcpp.h>

#include <algorithm>
#include <random>
#include <utility>

#include "absl/memory/memory.h"
#include "absl/strings/str_cat.h"
#include "absl/synchronization/mutex.h"
#include "absl/time/clock.h"
#include "common/base/status_macros.h"
#include "common/rpc/grpc_status.h"
#include "common/security/tls.h"
#include "lockstep/v1/coordination.grpc.pb.h"

namespace lockstep {
namespace {

// Names the coordinator and key in an error, keeping the code.
absl::Status Annotate(const grpc::Status& status, absl::string_view rpc,
                      absl::string_view key, const std::string& address) {
  absl::Status s = FromGrpcStatus(status);
  return absl::Status(
      s.code(), absl::StrCat(rpc, " of \"", key, "\" at coordinator ", address,
                             ": ", s.message()));
}

}  // namespace

uint64_t NewGroupMemberId() {
  std::random_device device;
  uint64_t id = 0;
  while (id == 0) {
    id = (static_cast<uint64_t>(device()) << 32) ^ device();
  }
  return id;
}

class CoordinatorClient::Impl {
 public:
  Impl(std::shared_ptr<grpc::Channel> channel, bool client_tls)
      : stub_(v1::Coordinator::NewStub(std::move(channel))),
        client_tls_(client_tls) {}

  std::unique_ptr<v1::Coordinator::Stub> stub_;
  const bool client_tls_;  // The channel uses TLS.
  // WatchGroup's call in flight, for CancelWatch.
  absl::Mutex watch_mu_;
  grpc::ClientContext* watch_ ABSL_GUARDED_BY(watch_mu_) = nullptr;
  bool watch_cancelled_ ABSL_GUARDED_BY(watch_mu_) = false;
};

absl::StatusOr<std::unique_ptr<CoordinatorClient>> CoordinatorClient::Create(
    const std::string& address, const TlsOptions& tls) {
  if (address.empty()) {
    return absl::InvalidArgumentError("no coordinator address given");
  }
  ASSIGN_OR_RETURN(std::shared_ptr<grpc::Channel> channel,
                   MakeChannel(address, tls));
  return absl::WrapUnique(new CoordinatorClient(
      address, std::make_unique<Impl>(std::move(channel), tls.ClientTls())));
}

CoordinatorClient::CoordinatorClient(std::string address,
                                     std::unique_ptr<Impl> impl)
    : address_(std::move(address)), impl_(std::move(impl)) {}

CoordinatorClient::~CoordinatorClient() = default;

absl::Status CoordinatorClient::Set(absl::string_view key,
                                    absl::string_view value,
                                    absl::Time deadline, bool if_absent) {
  grpc::ClientContext context;
  context.set_deadline(absl::ToChronoTime(deadline));
  context.set_wait_for_ready(true);
  v1::SetRequest request;
  request.set_key(std::string(key));
  request.set_value(std::string(value));
  request.set_if_absent(if_absent);
  v1::SetResponse response;
  grpc::Status status = impl_->stub_->Set(&context, request, &response);
  if (!status.ok()) return Annotate(status, "Set", key, address_);
  return absl::OkStatus();
}

absl::StatusOr<std::string> CoordinatorClient::Get(absl::string_view key,
                                                   absl::Time deadline) {
  grpc::ClientContext context;
  context.set_deadline(absl::ToChronoTime(deadline));
  context.set_wait_for_ready(true);
  v1::GetRequest request;
  request.set_key(std::string(key));
  v1::GetResponse response;
  grpc::Status status = impl_->stub_->Get(&context, request, &response);
  if (!status.ok()) return Annotate(status, "Get", key, address_);
  return std::move(*response.mutable_value());
}

absl::Status CoordinatorClient::Ping(absl::string_view key,
                                     absl::Time deadline) {
  grpc::ClientContext context;
  context.set_deadline(absl::ToChronoTime(deadline));
  v1::GetRequest request;
  request.set_key(std::string(key));
  request.set_no_wait(true);
  v1::GetResponse response;
  grpc::Status status = impl_->stub_->Get(&context, request, &response);
  if (status.ok() || status.error_code() == grpc::StatusCode::NOT_FOUND) {
    return absl::OkStatus();
  }
  return Annotate(status, "Get", key, address_);
}

absl::Status CoordinatorClient::ReportSteps(
    int rank, absl::Span<const StepReport> reports, absl::Time deadline) {
  grpc::ClientContext context;
  context.set_deadline(absl::ToChronoTime(deadline));
  v1::ReportStepsRequest request;
  request.set_rank(rank);
  for (const StepReport& r : reports) {
    v1::StepPhases* p = request.add_steps();
    p->set_step(r.step);
    p->set_input_us(r.input_us);
    p->set_compute_us(r.compute_us);
    p->set_push_us(r.push_us);
    p->set_wait_us(r.wait_us);
  }
  v1::ReportStepsResponse response;
  grpc::Status status =
      impl_->stub_->ReportSteps(&context, request, &response);
  if (status.ok()) return absl::OkStatus();
  return Annotate(status, "ReportSteps", absl::StrCat("rank ", rank),
                  address_);
}

absl::StatusOr<CoordinatorClient::Group> CoordinatorClient::JoinGroup(
    const GroupRequest& r, absl::Time deadline) {
  grpc::ClientContext context;
  context.set_deadline(absl::ToChronoTime(deadline));
  context.set_wait_for_ready(true);
  v1::JoinGroupRequest request;
  request.set_group(r.group);
  request.set_member(r.member);
  request.set_rank(r.rank);
  request.set_size(r.size);
  request.set_version(r.version);
  request.set_min_size(r.min_size);
  request.set_settle_ms(absl::ToInt64Milliseconds(r.settle));
  request.set_signature(r.signature);
  request.set_quorum(r.quorum);
  v1::JoinGroupResponse response;
  grpc::Status status = impl_->stub_->JoinGroup(&context, request, &response);
  // UNAVAILABLE from the server itself: it is starting (--workers=auto
  // learns the count from this call) or stopping. Asked again, after a
  // pause, until the deadline; so is a call that such a server cancelled
  // as it stopped listening to start for real.
  for (absl::Duration pause = absl::Milliseconds(50);
       (status.error_code() == grpc::StatusCode::UNAVAILABLE ||
        IsCutOffInTransit(FromGrpcStatus(status))) &&
       absl::Now() + pause < deadline;
       pause = std::min(2 * pause, absl::Seconds(1))) {
    absl::SleepFor(pause);
    grpc::ClientContext again;
    again.set_deadline(absl::ToChronoTime(deadline));
    again.set_wait_for_ready(true);
    status = impl_->stub_->JoinGroup(&again, request, &response);
  }
  if (status.error_code() == grpc::StatusCode::DEADLINE_EXCEEDED) {
    // A coordinator that refused our TLS handshake throughout looks the
    // same as a group that never formed, but is permanent: ask the
    // connection (fail-fast) why it failed.
    const absl::Status probe = Ping(r.group, absl::Now() + absl::Seconds(2));
    if (IsTlsRefusal(probe, impl_->client_tls_)) {
      return absl::FailedPreconditionError(absl::StrCat(
          "JoinGroup of \"", r.group, "\" at coordinator ", address_,
          ": the TLS handshake was refused: the coordinator did not accept "
          "this worker's certificate or this worker did not accept the "
          "coordinator's (",
          probe.message(),
          "); check --tls_cert, --tls_key and --tls_ca against the "
          "server's; retrying will not help"));
    }
    RETURN_IF_ERROR(CheckPlaintextRefusal(
        probe, impl_->client_tls_,
        absl::StrCat("JoinGroup of \"", r.group, "\": the coordinator ",
                     address_)));
  }
  if (!status.ok()) return Annotate(status, "JoinGroup", r.group, address_);
  Group group;
  group.generation = response.generation();
  group.index = response.index();
  group.members.assign(response.members().begin(), response.members().end());
  group.version = response.version();
  group.state_needed = response.state_needed();
  group.source_index = response.source_index();
  if (group.members.empty() || group.index < 0 ||
      group.index >= static_cast<int>(group.members.size()) ||
      group.members[group.index] != r.rank || group.source_index < 0 ||
      group.source_index >= static_cast<int>(group.members.size())) {
    return absl::InternalError(
        absl::StrCat("coordinator ", address_, " answered JoinGroup of rank ",
                     r.rank, " with an inconsistent group"));
  }
  return group;
}

absl::StatusOr<int> CoordinatorClient::WatchGroup(const std::string& group,
                                                  int64_t generation, int rank,
                                                  absl::Time deadline,
                                                  bool alive_only) {
  grpc::ClientContext context;
  context.set_deadline(absl::ToChronoTime(deadline));
  {
    absl::MutexLock lock(&impl_->watch_mu_);
    if (impl_->watch_cancelled_) {
      return absl::CancelledError("the watch was cancelled");
    }
    impl_->watch_ = &context;
  }
  v1::WatchGroupRequest request;
  request.set_group(group);
  request.set_generation(generation);
  if (rank >= 0) request.set_rank(rank);
  request.set_alive_only(alive_only);
  v1::WatchGroupResponse response;
  grpc::Status status = impl_->stub_->WatchGroup(&context, request, &response);
  {
    absl::MutexLock lock(&impl_->watch_mu_);
    impl_->watch_ = nullptr;
  }
  if (!status.ok()) return Annotate(status, "WatchGroup", group, address_);
  return response.waiting();
}

absl::Status CoordinatorClient::LeaveGroup(const std::string& group, int rank,
                                          absl::Time deadline) {
  grpc::ClientContext context;
  context.set_deadline(absl::ToChronoTime(deadline));
  v1::WatchGroupRequest request;
  request.set_group(group);
  request.set_rank(rank);
  request.set_leaving(true);
  v1::WatchGroupResponse response;
  grpc::Status status = impl_->stub_->WatchGroup(&context, request, &response);
  if (!status.ok()) return Annotate(status, "WatchGroup", group, address_);
  return absl::OkStatus();
}

void CoordinatorClient::CancelWatch() {
  absl::MutexLock lock(&impl_->watch_mu_);
  impl_->watch_cancelled_ = true;
  if (impl_->watch_ != nullptr) impl_->watch_->TryCancel();
}

void CoordinatorClient::ResetWatch() {
  absl::MutexLock lock(&impl_->watch_mu_);
  impl_->watch_cancelled_ = false;
}

}  // namespace lockstep
