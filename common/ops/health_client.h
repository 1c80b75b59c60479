// Asks a gRPC server how it is, with the standard grpc.health.v1 protocol
// (what Kubernetes' gRPC probes call). For lockstep_ctl and tests.
#ifndef LOCKSTEP_COMMON_OPS_HEALTH_CLIENT_H_
#define LOCKSTEP_COMMON_OPS_HEALTH_CLIENT_H_

#include <grpcpp/channel.h>

#include <memory>
#include <string>

#include "absl/status/statusor.h"
#include "absl/strings/string_view.h"
#include "absl/time/time.h"

namespace lockstep {

enum class HealthStatus { kUnknown, kServing, kNotServing, kServiceUnknown };

// "SERVING", "NOT_SERVING", ...: the protocol's names.
absl::string_view HealthStatusName(HealthStatus status);

// Health/Check over `channel` for `service` (empty: the server as a whole),
// within `timeout`. The RPC's error otherwise: UNAVAILABLE when nothing
// answers, NOT_FOUND for a service the server does not know.
absl::StatusOr<HealthStatus> CheckHealth(
    const std::shared_ptr<grpc::Channel>& channel, const std::string& service,
    absl::Duration timeout);

}  // namespace lockstep

#endif  // LOCKSTEP_COMMON_OPS_HEALTH_CLIENT_H_
