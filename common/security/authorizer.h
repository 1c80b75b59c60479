// Who may call which RPC: the check every Lockstep service adapter makes
// before it reads a request's contents.
//
// Roles. An RPC needs one of three kinds of access (Access): worker RPCs
// (Register, Initialize, Push, Pull, Leave; the Coordinator's Set and Get;
// the ring's SendChunk), read-only RPCs (GetStatus: a worker or an admin),
// and admin RPCs (SaveCheckpoint). A caller's roles come from how it
// authenticated:
//   - mutual TLS (the server has --tls_ca): from its certificate, which the
//     CA verified during the handshake. Its identities are the subject's CN
//     and every subject alternative name. Any identity in
//     --admin_identities makes it an admin; otherwise it is a worker when
//     --worker_identities is empty or lists one of its identities, and has
//     no role at all else. An admin is not a worker: it cannot push.
//   - no client certificates: every caller that passed the token check (or
//     every caller, with no token) has both roles; a shared secret cannot
//     tell roles apart.
// Token. With --token_file, every call must carry "authorization: Bearer
// <token>"; it is compared in constant time (SHA-256 digests compared with
// CRYPTO_memcmp). A missing or wrong token: UNAUTHENTICATED, checked before
// the role. An RPC outside the caller's roles: PERMISSION_DENIED. Messages
// name the caller's identity and the RPC, never a token.
//
// Immutable after Create; thread-safe.
#ifndef LOCKSTEP_COMMON_SECURITY_AUTHORIZER_H_
#define LOCKSTEP_COMMON_SECURITY_AUTHORIZER_H_

#include <grpcpp/server_context.h>

#include <array>
#include <cstdint>
#include <memory>
#include <optional>
#include <string>
#include <vector>

#include "absl/container/flat_hash_set.h"
#include "absl/status/status.h"
#include "absl/status/statusor.h"
#include "absl/strings/string_view.h"
#include "common/security/tls.h"

namespace lockstep {

// What an RPC needs.
enum class Access {
  kWorker,  // Training traffic.
  kRead,    // Status: a worker or an admin.
  kAdmin,   // Operations on the job (checkpoints).
};

// What a server knows about one call's caller; a view into the call.
struct Caller {
  // A client certificate was presented and verified by the CA.
  bool verified_certificate = false;
  // The certificate's CN and subject alternative names.
  std::vector<std::string> identities;
  // The "authorization" metadata, when sent. Points into the call.
  std::optional<absl::string_view> authorization;

  // Reads a call's peer and metadata (valid while the call is).
  static Caller FromContext(const grpc::ServerContextBase& context);
};

class Authorizer final {
 public:
  // Reads the token file, if any. INVALID_ARGUMENT for identity lists
  // without mutual TLS (--tls_ca) or an unreadable or malformed token file.
  static absl::StatusOr<std::unique_ptr<Authorizer>> Create(
      const TlsOptions& options);

  // OK, UNAUTHENTICATED or PERMISSION_DENIED (see the file comment); `rpc`
  // names the call in the message.
  absl::Status Check(const Caller& caller, Access access,
                     absl::string_view rpc) const;
  absl::Status Check(const grpc::ServerContextBase& context, Access access,
                     absl::string_view rpc) const {
    return Check(Caller::FromContext(context), access, rpc);
  }

 private:
  using Digest = std::array<uint8_t, 32>;
  Authorizer() = default;

  bool mutual_tls_ = false;
  // What the errors call the options (TlsOptions::names).
  TlsOptionNames names_;
  // SHA-256 of "Bearer <token>"; no token when nullopt. The token itself is
  // not kept.
  std::optional<Digest> authorization_digest_;
  absl::flat_hash_set<std::string> admins_;
  absl::flat_hash_set<std::string> workers_;  // Empty: every verified client.
};

// `authorizer` may be null: then every caller may call everything (a server
// made without security, as in unit tests).
inline absl::Status CheckAccess(const Authorizer* authorizer,
                                const grpc::ServerContextBase& context,
                                Access access, absl::string_view rpc) {
  return authorizer == nullptr ? absl::OkStatus()
                               : authorizer->Check(context, access, rpc);
}

}  // namespace lockstep

#endif  // LOCKSTEP_COMMON_SECURITY_AUTHORIZER_H_
