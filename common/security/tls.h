// Transport security for every Lockstep channel and server: TLS and mutual
// TLS from certificate files that are re-read while the process runs, a
// bearer token read from a file, and the rule that plaintext stays on
// loopback unless --insecure says otherwise. docs/security.md has the threat
// model; common/security/authorizer.h decides who may call what.
//
//   TlsOptions tls;                          // Usually TlsOptionsFromFlags().
//   tls.cert_file = "server.pem";
//   tls.key_file = "server.key";
//   tls.ca_file = "ca.pem";                  // Clients must present certs.
//   ASSIGN_OR_RETURN(auto credentials, MakeServerCredentials(tls, listen));
//   builder.AddListeningPort(listen, credentials, &port);
//
//   ASSIGN_OR_RETURN(auto channel, MakeChannel("10.0.0.1:2222", tls, args));
//
// Certificates come through gRPC's FileWatcherCertificateProvider: files
// replaced on disk (atomically, as Kubernetes updates a Secret) are used for
// new handshakes within `refresh_interval`; connections already open keep
// the certificates they were made with until the server's maximum connection
// age closes them. Errors name the flag and the file, never a file's
// contents. Free functions of immutable inputs; thread-safe.
#ifndef LOCKSTEP_COMMON_SECURITY_TLS_H_
#define LOCKSTEP_COMMON_SECURITY_TLS_H_

#include <grpcpp/channel.h>
#include <grpcpp/security/server_credentials.h>
#include <grpcpp/support/channel_arguments.h>

#include <memory>
#include <string>

#include "absl/status/status.h"
#include "absl/status/statusor.h"
#include "absl/strings/string_view.h"
#include "absl/time/time.h"
#include "common/security/tls_options.h"

namespace lockstep {

// True for addresses that never leave this host: 127.0.0.0/8, ::1,
// "localhost", and unix sockets. Takes gRPC addresses and targets
// ("host:port", "[::1]:port", "ipv4:127.0.0.1:80", "dns:///localhost:80",
// "unix:/path"). An empty host (":port") means every interface: false.
bool IsLoopbackAddress(absl::string_view address);

// Checks the files `options` names for a server (`server` true) or a client:
// that the needed ones are given, readable, parse as PEM, that the key
// matches the certificate and the certificate is valid now.
// INVALID_ARGUMENT naming the flag and file otherwise.
absl::Status CheckTlsFiles(const TlsOptions& options, bool server);

// Server credentials for listening on `listen_address`: TLS (mutual TLS with
// a CA) when options.ServerTls(), else plaintext -- which is refused with
// FAILED_PRECONDITION on a non-loopback address unless options.insecure.
absl::StatusOr<std::shared_ptr<grpc::ServerCredentials>> MakeServerCredentials(
    const TlsOptions& options, absl::string_view listen_address);

// How soon a channel whose peer went away tries again: first after
// kReconnectFirst, then backing off to at most kReconnectMost (gRPC's
// defaults, 1 s growing to 120 s, left workers idle for seconds after a
// restarted server was back: 7.1 s after a 10 s outage).
inline constexpr absl::Duration kReconnectFirst = absl::Milliseconds(100);
inline constexpr absl::Duration kReconnectMost = absl::Seconds(1);

// A channel to `target` with `args`: TLS when options.ClientTls() (with the
// client certificate, if given), and the bearer token when
// options.token_file is set: as call credentials over TLS, by an interceptor
// that adds the header over plaintext, which is refused with
// FAILED_PRECONDITION for a non-loopback target unless options.insecure.
// Reconnects as kReconnectFirst and kReconnectMost say.
absl::StatusOr<std::shared_ptr<grpc::Channel>> MakeChannel(
    const std::string& target, const TlsOptions& options,
    grpc::ChannelArguments args = grpc::ChannelArguments());

// The token in `path`: its content without trailing whitespace, which must
// be 16 to 4096 printable ASCII characters without spaces. Errors name the
// file (as `option`, the option that named it) and the rule, never the
// content.
absl::StatusOr<std::string> ReadTokenFile(
    const std::string& path, absl::string_view option = "token_file");

// The subject's common name (CN) of the first certificate in `cert_file`
// (empty when it has none); INVALID_ARGUMENT naming `option` when the file
// holds no PEM certificate.
absl::StatusOr<std::string> CertificateCommonName(absl::string_view option,
                                                  const std::string& cert_file);

// The gRPC tracers known not to print the bearer token: each ran a job
// with a token under GRPC_VERBOSITY=DEBUG and printed none of it (the
// suite runs them all at once). Others (tcp, channel, retry, the http and
// call ones, secure_endpoint over TLS, ...) print calls' bytes or
// metadata, and tracers gRPC adds later are unknown.
absl::Span<const absl::string_view> QuietGrpcTracers();

// FAILED_PRECONDITION when `grpc_trace` (GRPC_TRACE's value; null: unset)
// turns on a tracer that is not among QuietGrpcTracers() (one turned off,
// "-name", is fine). ReadTokenFile checks it first, on clients and
// servers.
absl::Status CheckTraceKeepsTokens(const char* grpc_trace);

// A few words for logs: "mutual TLS", "TLS", "plaintext", plus ", bearer
// token" when one is required. Never the token.
std::string DescribeServerSecurity(const TlsOptions& options);

}  // namespace lockstep

#endif  // LOCKSTEP_COMMON_SECURITY_TLS_H_
