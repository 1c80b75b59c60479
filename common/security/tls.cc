#include "common/security/tls.h"

#include <arpa/inet.h>
#include <grpc/grpc.h>
#include <grpcpp/create_channel.h>
#include <grpcpp/security/credentials.h>
#include <grpcpp/security/server_credentials.h>
#include <grpcpp/security/tls_certificate_provider.h>
#include <grpcpp/security/tls_credentials_options.h>
#include <openssl/err.h>
#include <openssl/pem.h>
#include <openssl/x509.h>

#include <algorithm>
#include <cerrno>
#include <cstdio>
#include <cstdlib>
#include <cstring>
#include <utility>

#include "absl/strings/ascii.h"
#include "absl/strings/match.h"
#include "absl/strings/str_cat.h"
#include "absl/strings/str_split.h"
#include "absl/strings/strip.h"
#include "common/base/status_macros.h"
#include "common/security/bearer_token.h"

namespace lockstep {
namespace {

// PEM files and token files are small; anything larger is not one.
constexpr size_t kMaxFileBytes = size_t{1} << 20;
constexpr size_t kMinTokenChars = 16;
constexpr size_t kMaxTokenChars = 4096;

struct BioFree {
  void operator()(BIO* b) const { BIO_free(b); }
};
struct X509Free {
  void operator()(X509* x) const { X509_free(x); }
};
struct KeyFree {
  void operator()(EVP_PKEY* k) const { EVP_PKEY_free(k); }
};
using X509Ptr = std::unique_ptr<X509, X509Free>;

// Reads at most kMaxFileBytes of `path`, the value of the option called
// `option` (its name in errors).
absl::StatusOr<std::string> ReadSmallFile(absl::string_view option,
                                          const std::string& path) {
  std::FILE* f = std::fopen(path.c_str(), "rb");
  if (f == nullptr) {
    return absl::InvalidArgumentError(absl::StrCat(
        option, "=", path, ": cannot open: ", std::strerror(errno)));
  }
  std::string bytes(kMaxFileBytes + 1, '\0');
  const size_t n = std::fread(bytes.data(), 1, bytes.size(), f);
  const bool failed = std::ferror(f) != 0;
  std::fclose(f);
  if (failed) {
    return absl::InvalidArgumentError(
        absl::StrCat(option, "=", path, ": read failed"));
  }
  if (n > kMaxFileBytes) {
    return absl::InvalidArgumentError(absl::StrCat(
        option, "=", path, ": larger than ", kMaxFileBytes, " bytes"));
  }
  bytes.resize(n);
  return bytes;
}

absl::Status Invalid(absl::string_view option, const std::string& path,
                     absl::string_view problem) {
  ERR_clear_error();  // Leave OpenSSL's per-thread queue clean for gRPC.
  return absl::InvalidArgumentError(
      absl::StrCat(option, "=", path, ": ", problem));
}

// Every certificate in a PEM file; at least one.
absl::StatusOr<std::vector<X509Ptr>> ReadCertificates(absl::string_view option,
                                                      const std::string& path) {
  ASSIGN_OR_RETURN(std::string pem, ReadSmallFile(option, path));
  std::unique_ptr<BIO, BioFree> bio(
      BIO_new_mem_buf(pem.data(), static_cast<int>(pem.size())));
  if (bio == nullptr) return Invalid(option, path, "out of memory");
  std::vector<X509Ptr> certs;
  while (X509* cert = PEM_read_bio_X509(bio.get(), nullptr, nullptr, nullptr)) {
    certs.emplace_back(cert);
  }
  ERR_clear_error();  // The loop ends on an expected "no start line".
  if (certs.empty()) {
    return Invalid(option, path, "holds no PEM certificate");
  }
  return certs;
}

absl::Status CheckKeyPair(const TlsOptions& o) {
  if (o.cert_file.empty() != o.key_file.empty()) {
    return absl::InvalidArgumentError(
        absl::StrCat(o.names.cert_file, " and ", o.names.key_file,
                     " go together: give both or neither"));
  }
  if (o.cert_file.empty()) return absl::OkStatus();
  ASSIGN_OR_RETURN(std::vector<X509Ptr> chain,
                   ReadCertificates(o.names.cert_file, o.cert_file));
  ASSIGN_OR_RETURN(std::string pem,
                   ReadSmallFile(o.names.key_file, o.key_file));
  std::unique_ptr<BIO, BioFree> bio(
      BIO_new_mem_buf(pem.data(), static_cast<int>(pem.size())));
  std::unique_ptr<EVP_PKEY, KeyFree> key(
      bio == nullptr
          ? nullptr
          : PEM_read_bio_PrivateKey(bio.get(), nullptr, nullptr, nullptr));
  // Overwrite our copy of the key; OpenSSL holds its own now.
  std::fill(pem.begin(), pem.end(), '\0');
  if (key == nullptr) {
    return Invalid(o.names.key_file, o.key_file,
                   "holds no unencrypted PEM private key");
  }
  X509* leaf = chain.front().get();
  if (X509_check_private_key(leaf, key.get()) != 1) {
    return Invalid(
        o.names.key_file, o.key_file,
        absl::StrCat("does not match the certificate in ", o.cert_file));
  }
  if (X509_cmp_current_time(X509_get0_notBefore(leaf)) > 0) {
    return Invalid(o.names.cert_file, o.cert_file,
                   "certificate is not valid yet");
  }
  if (X509_cmp_current_time(X509_get0_notAfter(leaf)) < 0) {
    return Invalid(o.names.cert_file, o.cert_file, "certificate has expired");
  }
  ERR_clear_error();
  return absl::OkStatus();
}

unsigned int RefreshSeconds(const TlsOptions& o) {
  const int64_t s = absl::ToInt64Seconds(o.refresh_interval);
  return static_cast<unsigned int>(std::clamp<int64_t>(s, 1, 86400));
}

// The client's channel credentials: TLS when options.ClientTls() (with
// the client certificate, if given), else plaintext; null when gRPC cannot
// make them. Sets the target name override on `args`.
std::shared_ptr<grpc::ChannelCredentials> ClientCredentials(
    const TlsOptions& options, grpc::ChannelArguments* args) {
  if (!options.ClientTls()) return grpc::InsecureChannelCredentials();
  auto provider = options.cert_file.empty()
                      ? std::make_shared<
                            grpc::experimental::FileWatcherCertificateProvider>(
                            options.ca_file, RefreshSeconds(options))
                      : std::make_shared<
                            grpc::experimental::FileWatcherCertificateProvider>(
                            options.key_file, options.cert_file,
                            options.ca_file, RefreshSeconds(options));
  grpc::experimental::TlsChannelCredentialsOptions tls_options;
  tls_options.set_certificate_provider(provider);
  tls_options.watch_root_certs();
  if (!options.cert_file.empty()) {
    tls_options.watch_identity_key_cert_pairs();
  }
  if (!options.server_name.empty()) {
    args->SetSslTargetNameOverride(options.server_name);
  }
  return grpc::experimental::TlsCredentials(tls_options);
}

}  // namespace

bool IsLoopbackAddress(absl::string_view address) {
  if (absl::StartsWith(address, "unix:") ||
      absl::StartsWith(address, "unix-abstract:")) {
    return true;
  }
  for (absl::string_view scheme : {"dns:///", "dns:", "ipv4:", "ipv6:"}) {
    if (absl::ConsumePrefix(&address, scheme)) break;
  }
  // gRPC's ipv4: and ipv6: targets may list several addresses: each one
  // must be loopback (a client may connect to any of them).
  if (address.find(',') != absl::string_view::npos) {
    for (absl::string_view part : absl::StrSplit(address, ',')) {
      if (!IsLoopbackAddress(part)) return false;
    }
    return true;
  }
  absl::string_view host = address;
  if (absl::StartsWith(host, "[")) {
    const size_t close = host.find(']');
    if (close == absl::string_view::npos) return false;
    host = host.substr(1, close - 1);
  } else if (std::count(host.begin(), host.end(), ':') == 1) {
    host = host.substr(0, host.find(':'));
  }
  if (host.empty()) return false;
  if (absl::EqualsIgnoreCase(host, "localhost")) return true;
  const std::string h(host);
  in_addr v4;
  if (inet_pton(AF_INET, h.c_str(), &v4) == 1) {
    return (ntohl(v4.s_addr) >> 24) == 127;
  }
  in6_addr v6;
  if (inet_pton(AF_INET6, h.c_str(), &v6) == 1) {
    if (IN6_IS_ADDR_LOOPBACK(&v6)) return true;
    return IN6_IS_ADDR_V4MAPPED(&v6) && v6.s6_addr[12] == 127;
  }
  return false;
}

absl::Status CheckTlsFiles(const TlsOptions& options, bool server) {
  RETURN_IF_ERROR(CheckKeyPair(options));
  if (server && options.cert_file.empty() && !options.ca_file.empty()) {
    return absl::InvalidArgumentError(absl::StrCat(
        options.names.ca_file, " on a server turns on mutual TLS, which needs ",
        options.names.cert_file, " and ", options.names.key_file, " as well"));
  }
  if (!server && !options.cert_file.empty() && options.ca_file.empty()) {
    return absl::InvalidArgumentError(absl::StrCat(
        "a client with ", options.names.cert_file, " needs ",
        options.names.ca_file, " to verify the servers it connects to"));
  }
  if (!options.ca_file.empty()) {
    RETURN_IF_ERROR(
        ReadCertificates(options.names.ca_file, options.ca_file).status());
  }
  return absl::OkStatus();
}

absl::StatusOr<std::shared_ptr<grpc::ServerCredentials>> MakeServerCredentials(
    const TlsOptions& options, absl::string_view listen_address) {
  RETURN_IF_ERROR(CheckTlsFiles(options, /*server=*/true));
  if (!options.token_file.empty()) {
    RETURN_IF_ERROR(
        ReadTokenFile(options.token_file, options.names.token_file).status());
  }
  if (!options.ServerTls()) {
    if (!options.insecure && !IsLoopbackAddress(listen_address)) {
      return absl::FailedPreconditionError(
          absl::StrCat("refusing to listen on ", listen_address,
                       " without TLS: give ", options.names.cert_file, " and ",
                       options.names.key_file, " (and ", options.names.ca_file,
                       " for mutual TLS), listen on loopback, or pass ",
                       options.names.insecure, " on a trusted network"));
    }
    return grpc::InsecureServerCredentials();
  }
  auto provider =
      std::make_shared<grpc::experimental::FileWatcherCertificateProvider>(
          options.key_file, options.cert_file, options.ca_file,
          RefreshSeconds(options));
  grpc::experimental::TlsServerCredentialsOptions tls(provider);
  tls.watch_identity_key_cert_pairs();
  if (options.ca_file.empty()) {
    tls.set_cert_request_type(GRPC_SSL_DONT_REQUEST_CLIENT_CERTIFICATE);
  } else {
    tls.watch_root_certs();
    tls.set_cert_request_type(
        GRPC_SSL_REQUEST_AND_REQUIRE_CLIENT_CERTIFICATE_AND_VERIFY);
  }
  std::shared_ptr<grpc::ServerCredentials> credentials =
      grpc::experimental::TlsServerCredentials(tls);
  if (credentials == nullptr) {
    return absl::InternalError("gRPC could not make TLS server credentials");
  }
  return credentials;
}

absl::StatusOr<std::shared_ptr<grpc::Channel>> MakeChannel(
    const std::string& target, const TlsOptions& options,
    grpc::ChannelArguments args) {
  RETURN_IF_ERROR(CheckTlsFiles(options, /*server=*/false));
  args.SetInt(GRPC_ARG_INITIAL_RECONNECT_BACKOFF_MS,
              static_cast<int>(absl::ToInt64Milliseconds(kReconnectFirst)));
  args.SetInt(GRPC_ARG_MAX_RECONNECT_BACKOFF_MS,
              static_cast<int>(absl::ToInt64Milliseconds(kReconnectMost)));
  const bool tls = options.ClientTls();
  std::shared_ptr<grpc::ChannelCredentials> credentials =
      ClientCredentials(options, &args);
  if (credentials == nullptr) {
    return absl::InternalError("gRPC could not make channel credentials");
  }
  if (options.token_file.empty()) {
    return grpc::CreateCustomChannel(target, credentials, args);
  }
  if (!tls && !options.insecure && !IsLoopbackAddress(target)) {
    return absl::FailedPreconditionError(
        absl::StrCat("refusing to send the bearer token in plaintext to ",
                     target, ": give ", options.names.ca_file, " (TLS), or ",
                     options.names.insecure, " on a trusted network"));
  }
  ASSIGN_OR_RETURN(std::string token,
                   ReadTokenFile(options.token_file, options.names.token_file));
  return ChannelWithToken(target, std::move(credentials), args, tls,
                          std::move(token));
}

absl::StatusOr<std::string> CertificateCommonName(
    absl::string_view option, const std::string& cert_file) {
  ASSIGN_OR_RETURN(std::vector<X509Ptr> chain,
                   ReadCertificates(option, cert_file));
  X509_NAME* subject = X509_get_subject_name(chain.front().get());
  const int at = subject == nullptr
                     ? -1
                     : X509_NAME_get_index_by_NID(subject, NID_commonName, -1);
  if (at < 0) return std::string();
  unsigned char* utf8 = nullptr;
  const int length = ASN1_STRING_to_UTF8(
      &utf8, X509_NAME_ENTRY_get_data(X509_NAME_get_entry(subject, at)));
  if (length < 0) return std::string();
  std::string name(reinterpret_cast<const char*>(utf8), length);
  OPENSSL_free(utf8);
  return name;
}

absl::StatusOr<std::string> ReadTokenFile(const std::string& path,
                                          absl::string_view option) {
  // Refused before the token is read, so that it is never in memory either.
  RETURN_IF_ERROR(CheckTraceKeepsTokens(std::getenv("GRPC_TRACE")));
  ASSIGN_OR_RETURN(std::string token, ReadSmallFile(option, path));
  while (!token.empty() && absl::ascii_isspace(token.back())) token.pop_back();
  const bool printable = std::all_of(
      token.begin(), token.end(), [](char c) { return c > ' ' && c < 0x7f; });
  if (!printable || token.size() < kMinTokenChars ||
      token.size() > kMaxTokenChars) {
    std::fill(token.begin(), token.end(), '\0');
    return absl::InvalidArgumentError(absl::StrCat(
        option, "=", path, ": must hold one token of ", kMinTokenChars, " to ",
        kMaxTokenChars,
        " printable ASCII characters without spaces (e.g. openssl rand "
        "-hex 32)"));
  }
  return token;
}

std::string DescribeServerSecurity(const TlsOptions& options) {
  std::string out = !options.ServerTls()      ? "plaintext"
                    : options.ca_file.empty() ? "TLS"
                                              : "mutual TLS";
  if (!options.token_file.empty()) absl::StrAppend(&out, ", bearer token");
  return out;
}

}  // namespace lockstep
