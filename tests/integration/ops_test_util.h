// What the operations integration tests (ops_integration_test.cc,
// ops_ctl_integration_test.cc) share: real lockstep_server and
// lockstep_worker processes on loopback, their health and metrics, the
// shard's version, and a polling wait.
#ifndef LOCKSTEP_TESTS_INTEGRATION_OPS_TEST_UTIL_H_
#define LOCKSTEP_TESTS_INTEGRATION_OPS_TEST_UTIL_H_

#include <cstdint>
#include <memory>
#include <string>
#include <vector>

#include "absl/status/statusor.h"
#include "absl/time/clock.h"
#include "absl/time/time.h"
#include "common/ops/health_client.h"
#include "tests/integration/subprocess.h"

namespace lockstep {

// The folder of the binaries under test.
extern const std::string kBin;
inline constexpr absl::Duration kDeadline = absl::Seconds(60);

// Polls `ready` until it holds or `timeout` passes.
template <typename Ready>
bool WaitUntil(Ready ready, absl::Duration timeout = kDeadline) {
  const absl::Time deadline = absl::Now() + timeout;
  while (absl::Now() < deadline) {
    if (ready()) return true;
    absl::SleepFor(absl::Milliseconds(20));
  }
  return ready();
}

// The body of GET http://127.0.0.1:port/metrics; empty when unreachable or
// not 200.
std::string Scrape(int port);

// grpc.health.v1 at 127.0.0.1:port, in plaintext.
absl::StatusOr<HealthStatus> Health(int port);
bool HealthIs(int port, HealthStatus want);

// A lockstep_server on 127.0.0.1:port (0: a free one), started with
// --port_file and waited for.
struct Server {
  std::unique_ptr<Subprocess> process;
  int port = 0;
  std::string address;
};

// Starts a server with `flags` (lockstep_server_testing when a flag is a
// --testing_ hook), its port file in `dir`.
Server StartServer(const std::string& dir, int port,
                   const std::vector<std::string>& flags);

// Starts worker `rank` of `workers` on synthetic data against `server`.
std::unique_ptr<Subprocess> StartWorker(const Server& server, int workers,
                                        int rank,
                                        const std::vector<std::string>& flags);

// Stops still-running workers as a pod's SIGTERM would: each leaves the
// job after its step (exit 143), which ends a job of --exit_when_done.
void StopWorkers(std::unique_ptr<Subprocess> (&workers)[2]);

// The shard's version (-2 when it does not answer).
int64_t Version(const Server& server);

}  // namespace lockstep

#endif  // LOCKSTEP_TESTS_INTEGRATION_OPS_TEST_UTIL_H_
