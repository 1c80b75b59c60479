#include "common/security/authorizer.h"

#include <grpc/grpc_security_constants.h>
#include <grpcpp/security/auth_context.h>
#include <openssl/crypto.h>
#include <openssl/sha.h>

#include <algorithm>
#include <utility>

#include "absl/memory/memory.h"
#include "absl/strings/str_cat.h"
#include "common/base/status_macros.h"

namespace lockstep {
namespace {

std::array<uint8_t, 32> Sha256(absl::string_view bytes) {
  std::array<uint8_t, 32> digest;
  SHA256(reinterpret_cast<const unsigned char*>(bytes.data()), bytes.size(),
         digest.data());
  return digest;
}

const char* AccessName(Access access) {
  switch (access) {
    case Access::kWorker:
      return "the worker role";
    case Access::kRead:
      return "the worker or admin role";
    case Access::kAdmin:
      return "the admin role";
  }
  return "?";
}

}  // namespace

Caller Caller::FromContext(const grpc::ServerContextBase& context) {
  Caller caller;
  std::shared_ptr<const grpc::AuthContext> auth = context.auth_context();
  if (auth != nullptr && auth->IsPeerAuthenticated()) {
    caller.verified_certificate = true;
    for (const char* property :
         {GRPC_X509_CN_PROPERTY_NAME, GRPC_X509_SAN_PROPERTY_NAME}) {
      for (const grpc::string_ref& value : auth->FindPropertyValues(property)) {
        caller.identities.emplace_back(value.data(), value.size());
      }
    }
  }
  const auto& metadata = context.client_metadata();
  auto it = metadata.find("authorization");
  if (it != metadata.end()) {
    caller.authorization =
        absl::string_view(it->second.data(), it->second.size());
  }
  return caller;
}

absl::StatusOr<std::unique_ptr<Authorizer>> Authorizer::Create(
    const TlsOptions& options) {
  auto authorizer = absl::WrapUnique(new Authorizer());
  authorizer->names_ = options.names;
  authorizer->mutual_tls_ = options.ServerTls() && !options.ca_file.empty();
  if (!authorizer->mutual_tls_ && (!options.admin_identities.empty() ||
                                   !options.worker_identities.empty())) {
    const TlsOptionNames& n = options.names;
    return absl::InvalidArgumentError(
        absl::StrCat(n.admin_identities, " and ", n.worker_identities,
                     " name client certificates: they need mutual TLS (",
                     n.cert_file, ", ", n.key_file, " and ", n.ca_file, ")"));
  }
  for (const std::string& id : options.admin_identities) {
    if (!id.empty()) authorizer->admins_.insert(id);
  }
  for (const std::string& id : options.worker_identities) {
    if (!id.empty()) authorizer->workers_.insert(id);
  }
  if (!options.token_file.empty()) {
    ASSIGN_OR_RETURN(
        std::string token,
        ReadTokenFile(options.token_file, options.names.token_file));
    std::string header = absl::StrCat("Bearer ", token);
    authorizer->authorization_digest_ = Sha256(header);
    std::fill(token.begin(), token.end(), '\0');
    std::fill(header.begin(), header.end(), '\0');
  }
  return authorizer;
}

absl::Status Authorizer::Check(const Caller& caller, Access access,
                               absl::string_view rpc) const {
  if (authorization_digest_.has_value()) {
    // Digests of equal length, compared without an early exit: the time
    // says nothing about the token or how much of it was right.
    const Digest given = Sha256(caller.authorization.value_or(""));
    const bool match =
        caller.authorization.has_value() &&
        CRYPTO_memcmp(given.data(), authorization_digest_->data(),
                      given.size()) == 0;
    if (!match) {
      return absl::UnauthenticatedError(absl::StrCat(
          rpc, ": ", caller.authorization.has_value() ? "wrong" : "missing",
          " bearer token (authorization metadata; see ", names_.token_file,
          ")"));
    }
  }
  bool worker = true;
  bool admin = true;
  std::string who = "caller";
  if (mutual_tls_) {
    if (!caller.verified_certificate) {
      return absl::UnauthenticatedError(
          absl::StrCat(rpc, ": no verified client certificate"));
    }
    admin = std::any_of(
        caller.identities.begin(), caller.identities.end(),
        [this](const std::string& id) { return admins_.contains(id); });
    worker = !admin &&
             (workers_.empty() ||
              std::any_of(caller.identities.begin(), caller.identities.end(),
                          [this](const std::string& id) {
                            return workers_.contains(id);
                          }));
    who = caller.identities.empty()
              ? "a client without a name"
              : absl::StrCat("\"", caller.identities.front(), "\"");
  }
  const bool allowed = access == Access::kWorker  ? worker
                       : access == Access::kAdmin ? admin
                                                  : worker || admin;
  if (!allowed) {
    return absl::PermissionDeniedError(absl::StrCat(
        rpc, " needs ", AccessName(access), "; ", who, " is ",
        admin    ? "an admin"
        : worker ? "a worker"
                 : absl::StrCat("neither a worker nor an admin (see ",
                                names_.worker_identities, ")")));
  }
  return absl::OkStatus();
}

}  // namespace lockstep
