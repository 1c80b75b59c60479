// The gRPC ShardTransport: one shard's lockstep.v1 stubs over one channel.
// Pushes travel as raw bytes (common/rpc/wire_format.h): the request refers to
// the caller's payload in place and the reply's weights are handed over in
// gRPC's own slices. Register waits for a server that is still starting
// (wait_for_ready). Every call but Leave can be cancelled by a CancelToken
// (cancel_token.h). gRPC types stay inside grpc_shard_transport.cc.
#ifndef LOCKSTEP_WORKER_EXCHANGE_PS_GRPC_SHARD_TRANSPORT_H_
#define LOCKSTEP_WORKER_EXCHANGE_PS_GRPC_SHARD_TRANSPORT_H_

#include <memory>
#include <string>
#include <vector>

#include "absl/status/status.h"
#include "absl/status/statusor.h"
#include "absl/strings/string_view.h"
#include "common/security/tls_options.h"
#include "worker/exchange/ps/cancel_token.h"
#include "worker/exchange/ps/shard_transport.h"

namespace lockstep {

// OK for a server address a channel can dial: "host:port" with a host and
// a port from 1 to 65535 ("[::1]:port" for IPv6), or a gRPC target with a
// scheme (unix:, dns:, ipv4:, ipv6:), which gRPC checks. INVALID_ARGUMENT
// otherwise, at once, rather than a connect timeout later.
absl::Status CheckServerAddress(absl::string_view address);

// One transport per address in `servers`, in order, over channels with
// `tls` and messages of up to `max_message_bytes`, their calls cancelled by
// `cancel` (not owned; null: never). INVALID_ARGUMENT with a malformed
// address (CheckServerAddress) or bad TLS settings or files;
// FAILED_PRECONDITION for a token that would travel in plaintext.
absl::StatusOr<std::vector<std::unique_ptr<ShardTransport>>>
MakeGrpcShardTransports(const std::vector<std::string>& servers,
                        const TlsOptions& tls, int max_message_bytes,
                        CancelToken* cancel = nullptr);

}  // namespace lockstep

#endif  // LOCKSTEP_WORKER_EXCHANGE_PS_GRPC_SHARD_TRANSPORT_H_
