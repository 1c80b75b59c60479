// The one place where gRPC's status and absl::Status convert into each other.
#ifndef LOCKSTEP_COMMON_RPC_GRPC_STATUS_H_
#define LOCKSTEP_COMMON_RPC_GRPC_STATUS_H_

#include <grpcpp/support/status.h>

#include "absl/status/status.h"

namespace lockstep {

grpc::Status ToGrpcStatus(const absl::Status& status);
absl::Status FromGrpcStatus(const grpc::Status& status);

}  // namespace lockstep

#endif  // LOCKSTEP_COMMON_RPC_GRPC_STATUS_H_
