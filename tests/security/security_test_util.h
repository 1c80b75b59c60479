// Helpers for the security tests: throwaway certificates from
// deploy/tls/make_certs.sh, lockstep_server processes on loopback, gRPC
// channels with chosen credentials, and a process's resident memory. Not
// thread-safe.
#ifndef LOCKSTEP_TESTS_SECURITY_SECURITY_TEST_UTIL_H_
#define LOCKSTEP_TESTS_SECURITY_SECURITY_TEST_UTIL_H_

#include <sys/types.h>

#include <cstdint>
#include <memory>
#include <string>
#include <vector>

#include "absl/status/status.h"
#include "absl/time/time.h"
#include "common/security/tls.h"
#include "lockstep/v1/lockstep.grpc.pb.h"
#include "tests/integration/subprocess.h"

namespace lockstep {

// A certificate set of make_certs.sh in `dir`: ca, server, worker, admin.
struct CertSet {
  std::string dir;
  std::string File(const std::string& name) const { return dir + "/" + name; }
  // Client options presenting `who` ("worker", "admin") and trusting ca.pem.
  TlsOptions Client(const std::string& who) const;
  // Server options with mutual TLS and lockstep-admin as the admin.
  std::vector<std::string> ServerFlags() const;
};

// Runs make_certs.sh into a new folder under `parent`; OK or why not.
absl::Status MakeCertSet(const std::string& parent, const std::string& name,
                         CertSet* out);

// A lockstep_server on 127.0.0.1 with a free port.
struct ServerProcess {
  Subprocess process;
  std::string address;  // Empty when it did not come up.
};

// Starts lockstep_server with `flags` (plus --listen and --port_file) and
// waits up to 30 s for its port file. `env` as for Subprocess::Start.
ServerProcess StartServer(const std::vector<std::string>& flags,
                          const std::string& dir,
                          const std::vector<std::string>& env = {});

// A ParameterServer stub over MakeChannel(address, tls).
std::unique_ptr<v1::ParameterServer::Stub> Stub(const std::string& address,
                                                const TlsOptions& tls);

// GetStatus with a deadline of `timeout`; its status.
absl::Status CallGetStatus(v1::ParameterServer::Stub& stub,
                           absl::Duration timeout = absl::Seconds(10));

// VmRSS of `pid` in KiB (from /proc/PID/status); -1 when unreadable.
int64_t RssKiB(pid_t pid);

// Writes `contents` to `path` (mode 0600).
void WriteFileOrDie(const std::string& path, const std::string& contents);

}  // namespace lockstep

#endif  // LOCKSTEP_TESTS_SECURITY_SECURITY_TEST_UTIL_H_
