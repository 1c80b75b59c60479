#include "worker/exchange/allreduce/coordinator_client.h"

#include <grpcpp/grpcpp.h>

#include <utility>

#include "absl/memory/memory.h"
#include "absl/strings/str_cat.h"
#include "common/grpc_status.h"
#include "common/status_macros.h"
#include "common/tls.h"
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

class CoordinatorClient::Impl {
 public:
  explicit Impl(std::shared_ptr<grpc::Channel> channel)
      : stub_(v1::Coordinator::NewStub(std::move(channel))) {}

  std::unique_ptr<v1::Coordinator::Stub> stub_;
};

absl::StatusOr<std::unique_ptr<CoordinatorClient>> CoordinatorClient::Create(
    const std::string& address, const TlsOptions& tls) {
  if (address.empty()) {
    return absl::InvalidArgumentError("no coordinator address given");
  }
  ASSIGN_OR_RETURN(std::shared_ptr<grpc::Channel> channel,
                   MakeChannel(address, tls));
  return absl::WrapUnique(new CoordinatorClient(
      address, std::make_unique<Impl>(std::move(channel))));
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
  v1::JoinGroupResponse response;
  grpc::Status status = impl_->stub_->JoinGroup(&context, request, &response);
  if (!status.ok()) return Annotate(status, "JoinGroup", r.group, address_);
  Group group;
  group.generation = response.generation();
  group.rank = response.rank();
  group.size = response.size();
  group.version = response.version();
  group.state_needed = response.state_needed();
  group.source_rank = response.source_rank();
  return group;
}

}  // namespace lockstep
