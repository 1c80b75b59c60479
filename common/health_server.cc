#include "common/health_server.h"

#include <grpcpp/health_check_service_interface.h>

#include <utility>

#include "absl/strings/str_cat.h"
#include "absl/time/clock.h"
#include "common/grpc_limits.h"

namespace lockstep {

absl::StatusOr<std::unique_ptr<HealthServer>> HealthServer::Start(int port) {
  if (port < 0 || port > 65535) {
    return absl::InvalidArgumentError(
        absl::StrCat("health port ", port, " is outside [0, 65535]"));
  }
  // Process-wide: every grpc::Server built from now on serves health.
  grpc::EnableDefaultHealthCheckService(true);
  std::unique_ptr<HealthServer> health(new HealthServer());
  grpc::ServerBuilder builder;
  builder.AddListeningPort(absl::StrCat("[::]:", port),
                           grpc::InsecureServerCredentials(), &health->port_);
  ListenExclusively(&builder);
  builder.RegisterCallbackGenericService(&health->unknown_methods_);
  health->server_ = builder.BuildAndStart();
  if (health->server_ == nullptr || health->port_ == 0) {
    return absl::UnavailableError(
        absl::StrCat("cannot serve health checks on port ", port));
  }
  // gRPC's service starts SERVING; nothing is ready yet.
  health->SetServing(false);
  return health;
}

HealthServer::~HealthServer() {
  if (server_ == nullptr) return;
  SetServing(false);
  server_->Shutdown(absl::ToChronoTime(absl::Now() + absl::Seconds(1)));
}

void HealthServer::SetServing(bool serving) {
  server_->GetHealthCheckService()->SetServingStatus(serving);
}

}  // namespace lockstep
