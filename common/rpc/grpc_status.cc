#include "common/rpc/grpc_status.h"

#include <string>

#include "absl/strings/ascii.h"
#include "absl/strings/match.h"
#include "absl/strings/str_cat.h"

namespace lockstep {

// Both enums follow google.rpc.Code, so the numeric values carry over.
grpc::Status ToGrpcStatus(const absl::Status& status) {
  if (status.ok()) return grpc::Status::OK;
  return grpc::Status(static_cast<grpc::StatusCode>(status.code()),
                      std::string(status.message()));
}

absl::Status FromGrpcStatus(const grpc::Status& status) {
  if (status.ok()) return absl::OkStatus();
  return absl::Status(static_cast<absl::StatusCode>(status.error_code()),
                      status.error_message());
}

bool IsTlsRefusal(const absl::Status& status, bool client_tls) {
  if (status.code() != absl::StatusCode::kUnavailable) return false;
  const std::string message = absl::AsciiStrToLower(status.message());
  return absl::StrContains(message, "handshake failed") ||
         (client_tls && absl::StrContains(message, "socket closed"));
}

absl::Status CheckPlaintextRefusal(const absl::Status& probe, bool client_tls,
                                   absl::string_view peer) {
  if (client_tls || probe.code() != absl::StatusCode::kUnavailable ||
      !absl::StrContains(absl::AsciiStrToLower(probe.message()),
                         "socket closed")) {
    return absl::OkStatus();
  }
  return absl::FailedPreconditionError(absl::StrCat(
      peer, " closed every plaintext connection before answering (",
      probe.message(),
      "): it expects TLS; give --tls_ca (and --tls_cert and --tls_key if it "
      "asks for a client certificate) as the server's; retrying will not "
      "help"));
}

bool IsCutOffInTransit(const absl::Status& status) {
  return absl::IsCancelled(status) &&
         absl::EqualsIgnoreCase(status.message(), "cancelled");
}

}  // namespace lockstep
