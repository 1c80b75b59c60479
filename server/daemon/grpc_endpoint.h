// The shard's listening gRPC server: its credentials and who may call what
// (MakeServerSecurity, from --tls_* and --token_file, checked before any
// work so that bad settings fail at once), the bind of --listen (waiting a
// moment for a predecessor's port, exclusively, with the message limits,
// streams and keepalive of ServerLimits) and the grpc.health.v1 service
// that probes read (SetServing).
//
// Owns the grpc::Server; the services are not owned and must outlive it.
// Thread-safe: SetServing may be called from any thread; Shutdown once.
#ifndef LOCKSTEP_SERVER_DAEMON_GRPC_ENDPOINT_H_
#define LOCKSTEP_SERVER_DAEMON_GRPC_ENDPOINT_H_

#include <grpcpp/grpcpp.h>

#include <cstdint>
#include <memory>
#include <string>
#include <vector>

#include "absl/status/status.h"
#include "absl/status/statusor.h"
#include "absl/strings/string_view.h"
#include "absl/time/time.h"
#include "common/security/authorizer.h"
#include "common/security/grpc_limits.h"
#include "common/security/tls_options.h"
#include "server/daemon/daemon_log.h"

namespace lockstep {

// The server's credentials and who may call what.
struct ServerSecurity {
  std::shared_ptr<grpc::ServerCredentials> credentials;
  std::unique_ptr<Authorizer> authorizer;
};

// From `tls` for a server on `listen`; warns (in the log) when anyone who
// reaches the server may call every RPC.
absl::StatusOr<ServerSecurity> MakeServerSecurity(const TlsOptions& tls,
                                                  const std::string& listen,
                                                  const DaemonLog& log);

// Refuses a listening address gRPC would bind otherwise than written (it
// takes port 70000 as 4464, 70000 mod 65536): HOST:PORT or [V6]:PORT (an
// empty host: every interface) with a decimal port in [0, 65535] (0: a free
// one), or unix:PATH and unix-abstract:NAME. INVALID_ARGUMENT naming `flag`
// and the address otherwise.
absl::Status CheckListenAddress(absl::string_view flag,
                                absl::string_view address);

// A predecessor killed a moment ago may still hold `address`'s port:
// waits up to `at_most` for it, saying so (the bind that follows reports
// the rest).
void WaitForPort(const std::string& address, absl::Duration at_most,
                 const DaemonLog& log);

class GrpcEndpoint final {
 public:
  struct Options {
    std::string listen;
    int max_receive_bytes = 0;  // Largest request taken.
    int max_send_bytes = 0;     // Largest reply sent.
    ServerLimits limits;
    absl::Duration port_wait = absl::Seconds(3);  // For WaitForPort.
  };

  // Listens on options.listen with `services` and the health service
  // (serving: false until SetServing(true)); null (said in the log) when
  // the port cannot be had.
  static std::unique_ptr<GrpcEndpoint> Start(
      const Options& options,
      const std::shared_ptr<grpc::ServerCredentials>& credentials,
      const std::vector<grpc::Service*>& services, const DaemonLog& log);

  ~GrpcEndpoint();

  int port() const { return port_; }
  // What the health service answers (NOT_SERVING while a checkpoint loads
  // and while draining).
  void SetServing(bool serving);
  // Stops taking calls and waits up to `deadline` for those under way.
  void Shutdown(absl::Time deadline);

 private:
  GrpcEndpoint(std::unique_ptr<grpc::Server> server, int port);

  const std::unique_ptr<grpc::Server> server_;
  const int port_;
};

}  // namespace lockstep

#endif  // LOCKSTEP_SERVER_DAEMON_GRPC_ENDPOINT_H_
