#include "tests/integration/ops_test_util.h"

#include <arpa/inet.h>
#include <grpcpp/grpcpp.h>
#include <netinet/in.h>
#include <signal.h>
#include <sys/socket.h>
#include <unistd.h>

#include <algorithm>
#include <cstdlib>
#include <memory>
#include <string>
#include <vector>

#include "absl/strings/ascii.h"
#include "absl/strings/match.h"
#include "absl/strings/str_cat.h"
#include "gmock/gmock.h"
#include "gtest/gtest.h"
#include "server/ctl/shard_client.h"

namespace lockstep {

using ::testing::HasSubstr;

const std::string kBin = LOCKSTEP_BIN_DIR;

// The body of GET http://127.0.0.1:port/metrics; empty when unreachable or
// not 200.
std::string Scrape(int port) {
  const int fd = socket(AF_INET, SOCK_STREAM, 0);
  sockaddr_in addr{};
  addr.sin_family = AF_INET;
  addr.sin_port = htons(static_cast<uint16_t>(port));
  addr.sin_addr.s_addr = htonl(INADDR_LOOPBACK);
  std::string response;
  if (connect(fd, reinterpret_cast<sockaddr*>(&addr), sizeof(addr)) == 0) {
    const std::string request =
        "GET /metrics HTTP/1.1\r\nHost: 127.0.0.1\r\n\r\n";
    (void)!send(fd, request.data(), request.size(), MSG_NOSIGNAL);
    char buffer[8192];
    ssize_t n;
    while ((n = recv(fd, buffer, sizeof(buffer), 0)) > 0) {
      response.append(buffer, static_cast<size_t>(n));
    }
  }
  close(fd);
  if (!absl::StartsWith(response, "HTTP/1.1 200 OK\r\n")) return "";
  return response.substr(response.find("\r\n\r\n") + 4);
}

absl::StatusOr<HealthStatus> Health(int port) {
  return CheckHealth(grpc::CreateChannel(absl::StrCat("127.0.0.1:", port),
                                         grpc::InsecureChannelCredentials()),
                     "", absl::Seconds(2));
}

bool HealthIs(int port, HealthStatus want) {
  absl::StatusOr<HealthStatus> h = Health(port);
  return h.ok() && *h == want;
}

Server StartServer(const std::string& dir, int port,
                   const std::vector<std::string>& flags) {
  static int starts = 0;
  const std::string port_file = absl::StrCat(dir, "/port", ++starts);
  // Test hooks live in their own binary; everything else runs the real one.
  const bool hooks = std::any_of(flags.begin(), flags.end(), [](auto& f) {
    return absl::StartsWith(f, "--testing_");
  });
  std::vector<std::string> argv = {
      kBin + (hooks ? "/lockstep_server_testing" : "/lockstep_server"),
      absl::StrCat("--listen=127.0.0.1:", port), "--port_file=" + port_file};
  argv.insert(argv.end(), flags.begin(), flags.end());
  Server s;
  s.process = std::make_unique<Subprocess>(Subprocess::Start(argv));
  WaitUntil([&]() {
    return !ReadFile(port_file).empty() ||
           s.process->Wait(absl::ZeroDuration()).has_value();
  });
  s.port = std::atoi(
      std::string(absl::StripAsciiWhitespace(ReadFile(port_file))).c_str());
  s.address = absl::StrCat("127.0.0.1:", s.port);
  return s;
}

std::unique_ptr<Subprocess> StartWorker(const Server& server, int workers,
                                        int rank,
                                        const std::vector<std::string>& flags) {
  std::vector<std::string> argv = {
      kBin + "/lockstep_worker", "--servers=" + server.address,
      absl::StrCat("--workers=", workers), absl::StrCat("--rank=", rank),
      "--dataset=synthetic", "--synthetic_examples=64000", "--epochs=1",
      "--progress=none",
      // StopWorkers stops both at once: one may already wait at the next
      // step's barrier for the other, which left. Until stop signals cancel
      // waiting calls (issue 24), its own step deadline ends that wait.
      "--step_timeout_s=20"};
  argv.insert(argv.end(), flags.begin(), flags.end());
  return std::make_unique<Subprocess>(Subprocess::Start(argv));
}

// Stops still-running workers as a pod's SIGTERM would: each leaves the
// job after its step (exit 143), which ends a job of --exit_when_done.
void StopWorkers(std::unique_ptr<Subprocess> (&workers)[2]) {
  for (auto& w : workers) kill(w->pid(), SIGTERM);
  for (auto& w : workers) {
    EXPECT_EQ(w->Wait(kDeadline), 143) << w->Output();
    EXPECT_THAT(w->Output(), HasSubstr("Left the job")) << "still training";
  }
}

int64_t Version(const Server& server) {
  absl::StatusOr<std::unique_ptr<ShardClient>> client =
      ShardClient::Create(server.address, TlsOptions());
  if (!client.ok()) return -2;
  absl::StatusOr<ShardStatus> status = (*client)->GetStatus(absl::Seconds(2));
  return status.ok() ? status->version : -2;
}

}  // namespace lockstep
