// The one place where gRPC's status and absl::Status convert into each other.
#ifndef LOCKSTEP_COMMON_RPC_GRPC_STATUS_H_
#define LOCKSTEP_COMMON_RPC_GRPC_STATUS_H_

#include <grpcpp/support/status.h>

#include "absl/status/status.h"
#include "absl/strings/string_view.h"

namespace lockstep {

grpc::Status ToGrpcStatus(const absl::Status& status);
absl::Status FromGrpcStatus(const grpc::Status& status);

// Whether `status`, a connection's failure (UNAVAILABLE), is a TLS handshake
// that was refused: a certificate not verified ("handshake failed"), or,
// when the client uses TLS (`client_tls`), the connection closed during
// the handshake ("Socket closed": a TLS 1.3 server that refuses the
// client's certificate closes it after the client's part). Retrying with
// the same certificates fails the same way; a server that is down or out
// of reach ("Connection refused", a timeout) is not a refusal.
bool IsTlsRefusal(const absl::Status& status, bool client_tls);

// FAILED_PRECONDITION, saying so, when `probe` (a fail-fast call's status)
// finds that `peer` closed a client's plaintext connection before any
// HTTP/2 frame ("Socket closed"): what a server that expects TLS does (a
// server that is not there refuses the connection instead). OK otherwise,
// and always for a client with TLS (`client_tls`; IsTlsRefusal's case).
absl::Status CheckPlaintextRefusal(const absl::Status& probe, bool client_tls,
                                   absl::string_view peer);

// Whether `status` is a call cut off on its way (CANCELLED with gRPC's own
// bare message: the server stopped listening with the call unanswered), as
// a lockstep_server with --workers=auto does once it has learned the
// count; not a refusal of the server's, whose CANCELLED says why.
bool IsCutOffInTransit(const absl::Status& status);

}  // namespace lockstep

#endif  // LOCKSTEP_COMMON_RPC_GRPC_STATUS_H_
