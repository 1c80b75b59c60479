#include "server/daemon/grpc_endpoint.h"

#include <grpc/support/log.h>
#include <grpcpp/health_check_service_interface.h>

#include <algorithm>
#include <cstdint>
#include <cstdlib>
#include <utility>

#include "absl/strings/ascii.h"
#include "absl/strings/match.h"
#include "absl/strings/numbers.h"
#include "absl/strings/str_cat.h"
#include "common/base/status_macros.h"
#include "common/security/tls.h"

namespace lockstep {
namespace {

// The log level gRPC takes from GRPC_VERBOSITY (ERROR when unset).
gpr_log_severity GrpcLogVerbosity() {
  const char* env = std::getenv("GRPC_VERBOSITY");
  const std::string level = absl::AsciiStrToUpper(env == nullptr ? "" : env);
  if (level == "DEBUG") return GPR_LOG_SEVERITY_DEBUG;
  if (level == "INFO") return GPR_LOG_SEVERITY_INFO;
  if (level == "NONE") {
    return static_cast<gpr_log_severity>(GPR_LOG_SEVERITY_ERROR + 1);
  }
  return GPR_LOG_SEVERITY_ERROR;
}

// Builds and starts `builder`'s server with gRPC's log off: a port that
// cannot be had makes gRPC log its internal error over several lines, and
// Start's own line says it clearly.
std::unique_ptr<grpc::Server> BuildQuietly(grpc::ServerBuilder* builder) {
  gpr_set_log_verbosity(
      static_cast<gpr_log_severity>(GPR_LOG_SEVERITY_ERROR + 1));
  std::unique_ptr<grpc::Server> server = builder->BuildAndStart();
  gpr_set_log_verbosity(GrpcLogVerbosity());
  return server;
}

}  // namespace

absl::StatusOr<ServerSecurity> MakeServerSecurity(const TlsOptions& tls,
                                                  const std::string& listen,
                                                  const DaemonLog& log) {
  ServerSecurity security;
  ASSIGN_OR_RETURN(security.credentials, MakeServerCredentials(tls, listen));
  ASSIGN_OR_RETURN(security.authorizer, Authorizer::Create(tls));
  if (!tls.ServerTls() && !IsLoopbackAddress(listen)) {
    log("warning: plaintext on a non-loopback address (--insecure): anyone "
        "on the network can read and write the model");
  } else if (tls.ServerTls() && tls.ca_file.empty() && tls.token_file.empty()) {
    log("warning: TLS without client certificates (--tls_ca) or "
        "--token_file: anyone who reaches the server may call every RPC");
  }
  return security;
}

absl::Status CheckListenAddress(absl::string_view flag,
                                absl::string_view address) {
  if (absl::StartsWith(address, "unix:") ||
      absl::StartsWith(address, "unix-abstract:")) {
    return absl::OkStatus();
  }
  const size_t colon = address.rfind(':');
  const absl::string_view host =
      address.substr(0, colon == address.npos ? 0 : colon);
  const absl::string_view port =
      colon == address.npos ? "" : address.substr(colon + 1);
  // An IPv6 host needs its brackets: "::1:80" has no clear port.
  const bool bracketed =
      absl::StartsWith(host, "[") && absl::EndsWith(host, "]");
  if (port.empty() ||
      !std::all_of(port.begin(), port.end(), absl::ascii_isdigit) ||
      (host.find(':') != host.npos && !bracketed)) {
    return absl::InvalidArgumentError(
        absl::StrCat(flag, " takes HOST:PORT, [V6]:PORT or unix:PATH, got \"",
                     address, "\""));
  }
  int64_t value = 0;
  if (port.size() > 18 || !absl::SimpleAtoi(port, &value) || value > 65535) {
    return absl::InvalidArgumentError(absl::StrCat(
        flag, ": the port must be in [0, 65535], got \"", address, "\""));
  }
  return absl::OkStatus();
}

void WaitForPort(const std::string& address, absl::Duration at_most,
                 const DaemonLog& log) {
  if (WaitForFreePort(address, absl::ZeroDuration())) return;
  log(absl::StrCat(address, " is in use; waiting up to ",
                   absl::FormatDuration(at_most), " for it"));
  WaitForFreePort(address, at_most);
}

std::unique_ptr<GrpcEndpoint> GrpcEndpoint::Start(
    const Options& options,
    const std::shared_ptr<grpc::ServerCredentials>& credentials,
    const std::vector<grpc::Service*>& services, const DaemonLog& log) {
  grpc::EnableDefaultHealthCheckService(true);  // grpc.health.v1, for probes.
  WaitForPort(options.listen, options.port_wait, log);
  grpc::ServerBuilder builder;
  int port = 0;
  builder.AddListeningPort(options.listen, credentials, &port);
  builder.SetMaxReceiveMessageSize(options.max_receive_bytes);
  builder.SetMaxSendMessageSize(options.max_send_bytes);
  ApplyServerLimits(options.limits, &builder);
  ListenExclusively(&builder);
  for (grpc::Service* service : services) builder.RegisterService(service);
  std::unique_ptr<grpc::Server> server = BuildQuietly(&builder);
  if (server == nullptr || port == 0) {
    log(absl::StrCat("cannot listen on ", options.listen,
                     " (is another process using the port?)"));
    return nullptr;
  }
  return std::unique_ptr<GrpcEndpoint>(
      new GrpcEndpoint(std::move(server), port));
}

GrpcEndpoint::GrpcEndpoint(std::unique_ptr<grpc::Server> server, int port)
    : server_(std::move(server)), port_(port) {}

GrpcEndpoint::~GrpcEndpoint() = default;

void GrpcEndpoint::SetServing(bool serving) {
  server_->GetHealthCheckService()->SetServingStatus(serving);
}

void GrpcEndpoint::Shutdown(absl::Time deadline) {
  server_->Shutdown(absl::ToChronoTime(deadline));
}

}  // namespace lockstep
