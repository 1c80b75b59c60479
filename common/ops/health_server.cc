#include "common/ops/health_server.h"

#include <grpcpp/health_check_service_interface.h>

#include <utility>

#include "absl/strings/str_cat.h"
#include "absl/time/clock.h"
#include "common/security/grpc_limits.h"

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
  // Open to anyone who reaches the port, in plaintext: a probe needs one
  // small call at a time, so a few streams, small messages and a small
  // memory quota, or a client could hold tens of thousands of Watch
  // streams (and a GB) on one connection.
  ServerLimits limits;
  limits.max_concurrent_streams = 16;
  limits.max_connection_idle = absl::Minutes(1);
  limits.max_connection_age = absl::Minutes(10);
  limits.max_connection_age_grace = absl::Seconds(10);
  limits.max_memory_bytes = int64_t{16} << 20;
  ApplyServerLimits(limits, &builder);
  builder.SetMaxReceiveMessageSize(4 << 10);
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
