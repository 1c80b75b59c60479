// GrpcEndpoint on loopback: the bind, an exclusive port, and the security
// warnings.
#include "server/daemon/grpc_endpoint.h"

#include <grpcpp/grpcpp.h>

#include <memory>
#include <string>

#include "absl/strings/str_cat.h"
#include "absl/time/clock.h"
#include "common/ops/health_client.h"
#include "gmock/gmock.h"
#include "gtest/gtest.h"
#include "server/coordination/coordination_service.h"
#include "server/coordination/coordination_store.h"
#include "server/coordination/group_rendezvous.h"
#include "tests/unit/daemon_test_util.h"

namespace lockstep {
namespace {

using ::testing::ElementsAre;
using ::testing::IsEmpty;

GrpcEndpoint::Options Loopback(int port) {
  GrpcEndpoint::Options options;
  options.listen = absl::StrCat("127.0.0.1:", port);
  options.max_receive_bytes = 1 << 20;
  options.max_send_bytes = 1 << 20;
  options.port_wait = absl::ZeroDuration();
  return options;
}

// A service to serve: gRPC starts no server without one.
class GrpcEndpointTest : public ::testing::Test {
 protected:
  std::unique_ptr<GrpcEndpoint> Start(int port) {
    return GrpcEndpoint::Start(Loopback(port),
                               grpc::InsecureServerCredentials(), {&service_},
                               log_.Log());
  }
  // What the health service answers on `port`.
  HealthStatus Health(int port) {
    auto channel = grpc::CreateChannel(absl::StrCat("127.0.0.1:", port),
                                       grpc::InsecureChannelCredentials());
    absl::StatusOr<HealthStatus> health =
        CheckHealth(channel, "", absl::Seconds(10));
    EXPECT_TRUE(health.ok()) << health.status();
    return health.ok() ? *health : HealthStatus::kUnknown;
  }

  CoordinationStore store_;
  GroupRendezvous groups_;
  CoordinatorService service_{&store_, &groups_};
  LogLines log_;
};

TEST_F(GrpcEndpointTest, ListensAndAnswersHealthChecksAsTold) {
  std::unique_ptr<GrpcEndpoint> endpoint = Start(0);
  ASSERT_NE(endpoint, nullptr);
  ASSERT_GT(endpoint->port(), 0);
  endpoint->SetServing(false);
  EXPECT_EQ(Health(endpoint->port()), HealthStatus::kNotServing);
  endpoint->SetServing(true);
  EXPECT_EQ(Health(endpoint->port()), HealthStatus::kServing);
  endpoint->Shutdown(absl::Now() + absl::Seconds(1));
  EXPECT_THAT(log_.lines, IsEmpty());
}

TEST_F(GrpcEndpointTest, APortInUseIsRefusedAndSaid) {
  std::unique_ptr<GrpcEndpoint> first = Start(0);
  ASSERT_NE(first, nullptr);
  const std::string address = absl::StrCat("127.0.0.1:", first->port());
  EXPECT_EQ(Start(first->port()), nullptr);
  EXPECT_THAT(
      log_.lines,
      ElementsAre(absl::StrCat(address, " is in use; waiting up to 0 for it"),
                  absl::StrCat("cannot listen on ", address,
                               " (is another process using the port?)")));
}

TEST(ServerSecurityTest, PlaintextOnLoopbackIsQuiet) {
  LogLines log;
  absl::StatusOr<ServerSecurity> security =
      MakeServerSecurity(TlsOptions(), "127.0.0.1:0", log.Log());
  ASSERT_TRUE(security.ok()) << security.status();
  EXPECT_NE(security->credentials, nullptr);
  EXPECT_THAT(log.lines, IsEmpty());
}

TEST(ServerSecurityTest, PlaintextOffLoopbackIsRefused) {
  LogLines log;
  absl::StatusOr<ServerSecurity> security =
      MakeServerSecurity(TlsOptions(), "0.0.0.0:0", log.Log());
  EXPECT_EQ(security.status().code(), absl::StatusCode::kFailedPrecondition);
  EXPECT_THAT(log.lines, IsEmpty());
}

TEST(ServerSecurityTest, InsecurePlaintextOffLoopbackIsWarnedOf) {
  LogLines log;
  TlsOptions tls;
  tls.insecure = true;
  absl::StatusOr<ServerSecurity> security =
      MakeServerSecurity(tls, "0.0.0.0:0", log.Log());
  ASSERT_TRUE(security.ok()) << security.status();
  EXPECT_THAT(log.lines,
              ElementsAre("warning: plaintext on a non-loopback address "
                          "(--insecure): anyone on the network can read and "
                          "write the model"));
}

// gRPC binds "127.0.0.1:70000" on port 4464 (70000 mod 65536): --listen
// takes only what gRPC binds as written.
TEST(CheckListenAddressTest, TakesOnlyAddressesBoundAsWritten) {
  for (const char* ok : {"127.0.0.1:0", "127.0.0.1:65535", "0.0.0.0:50051",
                         ":50051", "localhost:8080", "[::1]:80", "[::]:0",
                         "unix:/tmp/lockstep.sock", "unix-abstract:lockstep"}) {
    EXPECT_TRUE(CheckListenAddress("--listen", ok).ok()) << ok;
  }
  for (const char* out_of_range : {"127.0.0.1:65536", "127.0.0.1:70000",
                                   "[::1]:999999", "127.0.0.1:00000070000"}) {
    const absl::Status s = CheckListenAddress("--listen", out_of_range);
    EXPECT_EQ(s.code(), absl::StatusCode::kInvalidArgument);
    EXPECT_EQ(s.message(), absl::StrCat("--listen: the port must be in "
                                        "[0, 65535], got \"",
                                        out_of_range, "\""));
  }
  for (const char* malformed : {"127.0.0.1", "127.0.0.1:", "127.0.0.1:-1",
                                "127.0.0.1:8o", "localhost:http", "::1:80"}) {
    const absl::Status s = CheckListenAddress("--listen", malformed);
    EXPECT_EQ(s.code(), absl::StatusCode::kInvalidArgument);
    EXPECT_EQ(s.message(),
              absl::StrCat("--listen takes HOST:PORT, [V6]:PORT or unix:PATH, "
                           "got \"",
                           malformed, "\""));
  }
}

}  // namespace
}  // namespace lockstep
