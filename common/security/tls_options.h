// TlsOptions: how a process secures its gRPC channels and servers (see
// common/security/tls.h for what uses them). Plain data without gRPC types, so that
// options structs of clients and servers can carry it.
#ifndef LOCKSTEP_COMMON_SECURITY_TLS_OPTIONS_H_
#define LOCKSTEP_COMMON_SECURITY_TLS_OPTIONS_H_

#include <string>
#include <vector>

#include "absl/time/time.h"

namespace lockstep {

// What errors call each option. By default the field's own name; the layer
// that reads the options from flags (common/security/tls_flags.h) gives the flags'
// names, so that a message names what the user typed.
struct TlsOptionNames {
  std::string cert_file = "cert_file";
  std::string key_file = "key_file";
  std::string ca_file = "ca_file";
  std::string token_file = "token_file";
  std::string admin_identities = "admin_identities";
  std::string worker_identities = "worker_identities";
  std::string insecure = "insecure";
};

// How a process secures its channels; parsed once from flags
// (common/security/tls_flags.h). All paths are PEM files. Plain data: holds paths,
// never the secrets themselves.
struct TlsOptions {
  // This process's certificate chain and private key. A server needs both to
  // speak TLS; a client presents them to servers that ask (mutual TLS).
  std::string cert_file;
  std::string key_file;
  // CA bundle. A client verifies servers against it (TLS on the client side
  // needs it); a server given one requires and verifies client certificates
  // (mutual TLS).
  std::string ca_file;
  // Clients: the name servers' certificates must carry, when it is not the
  // host dialed (e.g. a Service name). Empty: the host dialed.
  std::string server_name;
  // A file holding a shared bearer token. Clients send it as
  // "authorization: Bearer <token>"; servers require it. Empty: no token.
  std::string token_file;
  // Servers with mutual TLS: client identities (certificate CN or any SAN)
  // with the admin role. Everyone else verified by the CA is a worker,
  // unless worker_identities is not empty: then only those are.
  std::vector<std::string> admin_identities;
  std::vector<std::string> worker_identities;
  // Allows plaintext servers on non-loopback addresses, and sending the
  // token over plaintext to them. For trusted networks only.
  bool insecure = false;
  // How often certificate files are re-read (gRPC's minimum is 1 s).
  absl::Duration refresh_interval = absl::Seconds(5);
  // How errors name the options above.
  TlsOptionNames names;

  // Whether a server with these options speaks TLS (has cert and key).
  bool ServerTls() const { return !cert_file.empty() || !key_file.empty(); }
  // Whether a client with these options speaks TLS (has a CA to trust).
  bool ClientTls() const { return !ca_file.empty(); }
};

}  // namespace lockstep

#endif  // LOCKSTEP_COMMON_SECURITY_TLS_OPTIONS_H_
