#include "common/security/tls_flags.h"

#include <string>
#include <vector>

#include "absl/flags/declare.h"
#include "absl/flags/flag.h"
#include "absl/strings/str_split.h"
#include "absl/strings/strip.h"

ABSL_FLAG(std::string, tls_cert, "",
          "PEM certificate chain of this process. Servers: with --tls_key, "
          "serve TLS. Clients: presented to servers that ask (mutual TLS). "
          "Re-read while running (see --tls_refresh_s).");
ABSL_FLAG(std::string, tls_key, "",
          "PEM private key for --tls_cert (unencrypted; keep it 0600).");
ABSL_FLAG(std::string, tls_ca, "",
          "PEM CA bundle. Clients: speak TLS and verify servers against it. "
          "Servers: require client certificates it verifies (mutual TLS).");
ABSL_FLAG(std::string, tls_server_name, "",
          "Clients: the name the servers' certificates carry, when it is "
          "not the host dialed. Default: the host dialed.");
ABSL_FLAG(int, tls_refresh_s, 5,
          "Seconds between checks of the certificate files for rotation "
          "(1..86400).");
ABSL_FLAG(std::string, token_file, "",
          "File holding a shared bearer token (16-4096 printable "
          "characters). Clients send it as 'authorization: Bearer ...'; "
          "servers refuse calls without it (UNAUTHENTICATED). Never pass a "
          "token in a flag.");
ABSL_FLAG(bool, insecure, false,
          "Allow plaintext gRPC off loopback: servers listening on other "
          "addresses without TLS, and clients sending --token_file over "
          "plaintext. Only for networks you trust.");

// Defined in common/security/tls_server_flags.cc, so that only the server lists them.
ABSL_DECLARE_FLAG(std::string, admin_identities);
ABSL_DECLARE_FLAG(std::string, worker_identities);

namespace lockstep {
namespace {

std::vector<std::string> SplitList(const std::string& text) {
  std::vector<std::string> out;
  for (absl::string_view item : absl::StrSplit(text, ',', absl::SkipEmpty())) {
    item = absl::StripAsciiWhitespace(item);
    if (!item.empty()) out.emplace_back(item);
  }
  return out;
}

}  // namespace

TlsOptionNames TlsFlagNames() {
  TlsOptionNames names;
  names.cert_file = "--tls_cert";
  names.key_file = "--tls_key";
  names.ca_file = "--tls_ca";
  names.token_file = "--token_file";
  names.admin_identities = "--admin_identities";
  names.worker_identities = "--worker_identities";
  names.insecure = "--insecure";
  return names;
}

absl::StatusOr<TlsOptions> TlsOptionsFromFlags() {
  TlsOptions o;
  o.cert_file = absl::GetFlag(FLAGS_tls_cert);
  o.key_file = absl::GetFlag(FLAGS_tls_key);
  o.ca_file = absl::GetFlag(FLAGS_tls_ca);
  o.server_name = absl::GetFlag(FLAGS_tls_server_name);
  o.token_file = absl::GetFlag(FLAGS_token_file);
  o.admin_identities = SplitList(absl::GetFlag(FLAGS_admin_identities));
  o.worker_identities = SplitList(absl::GetFlag(FLAGS_worker_identities));
  o.insecure = absl::GetFlag(FLAGS_insecure);
  const int refresh = absl::GetFlag(FLAGS_tls_refresh_s);
  if (refresh < 1 || refresh > 86400) {
    return absl::InvalidArgumentError("--tls_refresh_s must be in [1, 86400]");
  }
  o.refresh_interval = absl::Seconds(refresh);
  o.names = TlsFlagNames();
  return o;
}

}  // namespace lockstep
