// A gRPC server that serves only grpc.health.v1, for a process that has no
// other gRPC service of its own (a worker), so that Kubernetes' native gRPC
// probes can ask it how it is.
//
// HealthServer owns the grpc::Server. It starts NOT_SERVING; the owner says
// SERVING while the process does its work (a worker: while it trains).
// Processes that already run a grpc::Server enable gRPC's built-in health
// service on it instead (see server/daemon/daemon.cc). Thread-safe.
#ifndef LOCKSTEP_COMMON_OPS_HEALTH_SERVER_H_
#define LOCKSTEP_COMMON_OPS_HEALTH_SERVER_H_

#include <grpcpp/generic/async_generic_service.h>
#include <grpcpp/grpcpp.h>

#include <memory>

#include "absl/status/statusor.h"

namespace lockstep {

class HealthServer final {
 public:
  // Listens on every interface at `port` (0: the kernel picks; see port()).
  // UNAVAILABLE when the port cannot be bound.
  static absl::StatusOr<std::unique_ptr<HealthServer>> Start(int port);
  // NOT_SERVING, then shuts the server down (a second at most).
  ~HealthServer();

  HealthServer(const HealthServer&) = delete;
  HealthServer& operator=(const HealthServer&) = delete;

  void SetServing(bool serving);
  int port() const { return port_; }

 private:
  HealthServer() = default;

  // Answers every other method UNIMPLEMENTED. gRPC builds no server without
  // a service of its own, and the health service is added only as it starts.
  grpc::CallbackGenericService unknown_methods_;
  std::unique_ptr<grpc::Server> server_;
  int port_ = 0;
};

}  // namespace lockstep

#endif  // LOCKSTEP_COMMON_OPS_HEALTH_SERVER_H_
