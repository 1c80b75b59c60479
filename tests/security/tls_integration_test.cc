// A real lockstep_server over TLS and mutual TLS on loopback, called by test
// clients and lockstep_worker processes with chosen credentials.
#include <unistd.h>

#include <cstdio>
#include <string>
#include <vector>

#include "absl/strings/str_cat.h"
#include "absl/time/clock.h"
#include "common/rpc/grpc_status.h"
#include "gmock/gmock.h"
#include "gtest/gtest.h"
#include "lockstep/v1/coordination.grpc.pb.h"
#include "tests/integration/subprocess.h"
#include "tests/security/security_test_util.h"

namespace lockstep {
namespace {

using ::testing::HasSubstr;
using ::testing::Not;

const std::string kBin = LOCKSTEP_BIN_DIR;

// What lockstep_worker printed with the wrong token, with the right one
// under gRPC's http tracer, and with the right one.
struct TokenWorkerRuns {
  RunResult refused, traced, trained;
};

// Workers against the token server at `address`: the wrong token is
// refused, the http tracer is refused with a token, the right token trains.
TokenWorkerRuns RunTokenWorkers(const std::string& address, const CertSet& ca,
                                const std::string& good_file,
                                const std::string& bad_file,
                                const std::vector<std::string>& env) {
  const std::vector<std::string> worker = {kBin + "/lockstep_worker",
                                           "--servers=" + address,
                                           "--workers=1",
                                           "--rank=0",
                                           "--dataset=synthetic",
                                           "--synthetic_examples=640",
                                           "--max_steps=2",
                                           "--progress=none",
                                           "--connect_timeout_s=10",
                                           "--tls_ca=" + ca.File("ca.pem")};
  std::vector<std::string> wrong = worker;
  wrong.push_back("--token_file=" + bad_file);
  RunResult refused = RunProcess(wrong, env, absl::Seconds(60));
  EXPECT_NE(refused.exit_code, 0);
  EXPECT_THAT(refused.output, HasSubstr("UNAUTHENTICATED"));
  std::vector<std::string> right = worker;
  right.push_back("--token_file=" + good_file);
  // gRPC's http tracer logs every header: a token file is refused with it.
  std::vector<std::string> traced_env = env;
  traced_env.push_back("GRPC_TRACE=http");
  RunResult traced = RunProcess(right, traced_env, absl::Seconds(60));
  EXPECT_NE(traced.exit_code, 0) << traced.output;
  EXPECT_THAT(traced.output, HasSubstr("GRPC_TRACE=http"));
  RunResult trained = RunProcess(right, env, absl::Seconds(60));
  EXPECT_EQ(trained.exit_code, 0) << trained.output;
  return {refused, traced, trained};
}

// A plaintext server on loopback with the token in `good_file`: the
// interceptor's path refuses the wrong token and takes the right one.
// *output gets what the server printed.
void CheckPlaintextTokenServer(const std::string& dir,
                               const std::string& good_file,
                               const std::string& bad_file,
                               const std::vector<std::string>& env,
                               std::string* output) {
  ServerProcess plain =
      StartServer({"--token_file=" + good_file, "--workers=1"}, dir, env);
  ASSERT_FALSE(plain.address.empty());
  TlsOptions loopback;
  loopback.token_file = bad_file;
  EXPECT_EQ(CallGetStatus(*Stub(plain.address, loopback)).code(),
            absl::StatusCode::kUnauthenticated);
  loopback.token_file = good_file;
  EXPECT_TRUE(CallGetStatus(*Stub(plain.address, loopback)).ok());
  plain.process.Kill();
  *output = plain.process.Output();
}

class TlsIntegrationTest : public ::testing::Test {
 protected:
  static void SetUpTestSuite() {
    dir_ = new std::string(MakeTempDir());
    a_ = new CertSet;
    b_ = new CertSet;
    ASSERT_TRUE(MakeCertSet(*dir_, "a", a_).ok());
    ASSERT_TRUE(MakeCertSet(*dir_, "b", b_).ok());
  }
  static void TearDownTestSuite() {
    delete a_;
    delete b_;
    delete dir_;
  }

  // A mutual-TLS server with set A's certificates.
  ServerProcess StartMutualTlsServer(std::vector<std::string> extra = {}) {
    std::vector<std::string> flags = a_->ServerFlags();
    flags.push_back("--workers=1");
    flags.insert(flags.end(), extra.begin(), extra.end());
    ServerProcess s = StartServer(flags, *dir_);
    EXPECT_FALSE(s.address.empty()) << s.process.Output();
    return s;
  }

  static std::string* dir_;
  static CertSet* a_;
  static CertSet* b_;
};
std::string* TlsIntegrationTest::dir_ = nullptr;
CertSet* TlsIntegrationTest::a_ = nullptr;
CertSet* TlsIntegrationTest::b_ = nullptr;

TEST_F(TlsIntegrationTest, PlaintextClientCannotTalkToTlsServer) {
  ServerProcess server = StartMutualTlsServer();
  EXPECT_THAT(server.process.Output(), HasSubstr("(mutual TLS)"));
  auto plain = Stub(server.address, TlsOptions());
  EXPECT_EQ(CallGetStatus(*plain, absl::Seconds(5)).code(),
            absl::StatusCode::kUnavailable);
  // The same server answers a client with the right certificate.
  auto worker = Stub(server.address, a_->Client("worker"));
  EXPECT_TRUE(CallGetStatus(*worker).ok());
}

// lockstep_ctl without TLS, or without a client certificate, against a
// mutual-TLS job: the connection is closed, and the error says what may be
// missing rather than only "Socket closed".
TEST_F(TlsIntegrationTest, CtlWithoutClientCertificateGetsAHint) {
  ServerProcess server = StartMutualTlsServer();
  const std::string ctl = kBin + "/lockstep_ctl";
  const RunResult plain =
      RunProcess({ctl, "status", server.address, "--timeout=5s"});
  EXPECT_EQ(plain.exit_code, 1) << plain.output;
  EXPECT_THAT(plain.output,
              HasSubstr("(the server may require TLS: give --tls_ca, and "
                        "--tls_cert and --tls_key if it asks for a client "
                        "certificate)"));
  const RunResult no_cert =
      RunProcess({ctl, "status", server.address, "--timeout=5s",
                  "--tls_ca=" + a_->File("ca.pem")});
  EXPECT_EQ(no_cert.exit_code, 1) << no_cert.output;
  EXPECT_THAT(no_cert.output,
              HasSubstr("(the server may require a client certificate: give "
                        "--tls_cert and --tls_key)"));
}

TEST_F(TlsIntegrationTest, CertificatesFromAnotherCaAreRefused) {
  ServerProcess server = StartMutualTlsServer();
  // A client certificate the server's CA did not sign.
  TlsOptions foreign_client = b_->Client("worker");
  foreign_client.ca_file = a_->File("ca.pem");  // Trusts the server.
  EXPECT_EQ(
      CallGetStatus(*Stub(server.address, foreign_client), absl::Seconds(5))
          .code(),
      absl::StatusCode::kUnavailable);
  // A client that does not trust the server's CA.
  TlsOptions distrustful = a_->Client("worker");
  distrustful.ca_file = b_->File("ca.pem");
  EXPECT_EQ(CallGetStatus(*Stub(server.address, distrustful), absl::Seconds(5))
                .code(),
            absl::StatusCode::kUnavailable);
  // TLS without a client certificate, against a mutual-TLS server.
  TlsOptions anonymous;
  anonymous.ca_file = a_->File("ca.pem");
  EXPECT_EQ(
      CallGetStatus(*Stub(server.address, anonymous), absl::Seconds(5)).code(),
      absl::StatusCode::kUnavailable);
}

// lockstep_worker against `address` with `tls` (the flags), waiting 1 s
// for a server.
RunResult RunTlsWorker(const std::string& address,
                       const std::vector<std::string>& tls,
                       const std::vector<std::string>& mode = {"--workers=1"}) {
  std::vector<std::string> argv = {
      kBin + "/lockstep_worker", "--servers=" + address,     "--rank=0",
      "--dataset=synthetic",     "--synthetic_examples=640", "--max_steps=2",
      "--progress=none",         "--connect_timeout_s=1"};
  argv.insert(argv.end(), tls.begin(), tls.end());
  argv.insert(argv.end(), mode.begin(), mode.end());
  return RunProcess(argv, {}, absl::Seconds(60));
}

// A refused certificate is permanent (exit 2, saying so), whichever side
// refused it; a server that is not there stays retryable (exit 75).
TEST_F(TlsIntegrationTest, AWorkerWhoseCertificateIsRefusedExitsPermanent) {
  ServerProcess server = StartMutualTlsServer();
  const RunResult foreign =
      RunTlsWorker(server.address, {"--tls_ca=" + a_->File("ca.pem"),
                                    "--tls_cert=" + b_->File("worker.pem"),
                                    "--tls_key=" + b_->File("worker.key")});
  EXPECT_EQ(foreign.exit_code, 2) << foreign.output;
  EXPECT_THAT(foreign.output,
              HasSubstr("registering with shard 0: the TLS handshake with " +
                        server.address +
                        " was refused: the server did not accept this "
                        "worker's certificate"));
  const RunResult distrustful =
      RunTlsWorker(server.address, {"--tls_ca=" + b_->File("ca.pem"),
                                    "--tls_cert=" + a_->File("worker.pem"),
                                    "--tls_key=" + a_->File("worker.key")});
  EXPECT_EQ(distrustful.exit_code, 2) << distrustful.output;
  EXPECT_THAT(distrustful.output, HasSubstr("certificate verify failed"));
  // An all-reduce rank meets the coordinator first.
  const RunResult rank = RunTlsWorker(
      server.address,
      {"--tls_ca=" + a_->File("ca.pem"), "--tls_cert=" + b_->File("worker.pem"),
       "--tls_key=" + b_->File("worker.key")},
      {"--workers=2", "--sync=allreduce"});
  EXPECT_EQ(rank.exit_code, 2) << rank.output;
  EXPECT_THAT(rank.output,
              HasSubstr("the TLS handshake was refused: the coordinator did "
                        "not accept this worker's certificate"));
  const RunResult nobody = RunTlsWorker(
      absl::StrCat("127.0.0.1:", FreePort()),
      {"--tls_ca=" + a_->File("ca.pem"), "--tls_cert=" + a_->File("worker.pem"),
       "--tls_key=" + a_->File("worker.key")});
  EXPECT_EQ(nobody.exit_code, 75) << nobody.output;
  EXPECT_THAT(nobody.output, Not(HasSubstr("TLS handshake")));
  EXPECT_THAT(nobody.output, Not(HasSubstr("expects TLS")));
  // A worker without TLS against the TLS server: permanent too, whether it
  // meets the server or the coordinator first.
  for (const std::string workers : {"--workers=1", "--workers=2"}) {
    std::vector<std::string> mode = {workers};
    if (workers == "--workers=2") mode.push_back("--sync=allreduce");
    const RunResult plain = RunTlsWorker(server.address, {}, mode);
    EXPECT_EQ(plain.exit_code, 2) << plain.output;
    EXPECT_THAT(plain.output,
                HasSubstr(" closed every plaintext connection before "
                          "answering (")) << plain.output;
    EXPECT_THAT(plain.output, HasSubstr("): it expects TLS; give --tls_ca"));
  }
}

TEST_F(TlsIntegrationTest, RolesComeFromClientCertificates) {
  ServerProcess server = StartMutualTlsServer();
  auto worker = Stub(server.address, a_->Client("worker"));
  auto admin = Stub(server.address, a_->Client("admin"));
  EXPECT_TRUE(CallGetStatus(*worker).ok());
  EXPECT_TRUE(CallGetStatus(*admin).ok());

  auto save = [](v1::ParameterServer::Stub& stub) {
    grpc::ClientContext context;
    context.set_deadline(absl::ToChronoTime(absl::Now() + absl::Seconds(10)));
    v1::SaveCheckpointRequest request;
    v1::SaveCheckpointResponse response;
    return FromGrpcStatus(stub.SaveCheckpoint(&context, request, &response));
  };
  absl::Status denied = save(*worker);
  EXPECT_EQ(denied.code(), absl::StatusCode::kPermissionDenied) << denied;
  EXPECT_THAT(denied.message(), HasSubstr("lockstep-worker"));
  // The admin may; this server has no --checkpoint_dir, so it cannot.
  EXPECT_EQ(save(*admin).code(), absl::StatusCode::kFailedPrecondition);

  // An admin is not a worker.
  grpc::ClientContext context;
  v1::RegisterRequest request;
  v1::RegisterResponse response;
  EXPECT_EQ(admin->Register(&context, request, &response).error_code(),
            grpc::StatusCode::PERMISSION_DENIED);

  // The Coordinator on the same port checks the same way.
  absl::StatusOr<std::shared_ptr<grpc::Channel>> channel =
      MakeChannel(server.address, a_->Client("admin"));
  ASSERT_TRUE(channel.ok());
  auto coordinator = v1::Coordinator::NewStub(*channel);
  grpc::ClientContext set_context;
  v1::SetRequest set;
  set.set_key("k");
  v1::SetResponse set_response;
  EXPECT_EQ(coordinator->Set(&set_context, set, &set_response).error_code(),
            grpc::StatusCode::PERMISSION_DENIED);
}

TEST_F(TlsIntegrationTest, WorkerIdentitiesRestrictWhoIsAWorker) {
  ServerProcess server =
      StartMutualTlsServer({"--worker_identities=someone-else"});
  absl::Status s = CallGetStatus(*Stub(server.address, a_->Client("worker")));
  EXPECT_EQ(s.code(), absl::StatusCode::kPermissionDenied) << s;
}

TEST_F(TlsIntegrationTest, WrongTokenIsUnauthenticatedAndNeverPrinted) {
  const std::string good = "good-token-7f3a9c2e51d04b68";
  const std::string bad = "bad-token-0c4e7a1f93b26d85";
  const std::string good_file = *dir_ + "/good.token";
  const std::string bad_file = *dir_ + "/bad.token";
  WriteFileOrDie(good_file, good + "\n");
  WriteFileOrDie(bad_file, bad + "\n");
  // gRPC at its most talkative: still no token in any output.
  const std::vector<std::string> env = {"GRPC_VERBOSITY=DEBUG"};

  // Server-side TLS with a token, the deployment without client
  // certificates.
  ServerProcess server =
      StartServer({"--tls_cert=" + a_->File("server.pem"),
                   "--tls_key=" + a_->File("server.key"),
                   "--token_file=" + good_file, "--workers=1"},
                  *dir_, env);
  ASSERT_FALSE(server.address.empty()) << server.process.Output();
  TlsOptions client;
  client.ca_file = a_->File("ca.pem");
  EXPECT_EQ(CallGetStatus(*Stub(server.address, client)).code(),
            absl::StatusCode::kUnauthenticated);
  client.token_file = bad_file;
  EXPECT_EQ(CallGetStatus(*Stub(server.address, client)).code(),
            absl::StatusCode::kUnauthenticated);
  client.token_file = good_file;
  EXPECT_TRUE(CallGetStatus(*Stub(server.address, client)).ok());

  const TokenWorkerRuns runs =
      RunTokenWorkers(server.address, *a_, good_file, bad_file, env);
  EXPECT_EQ(server.process.Wait(absl::Seconds(30)), 0);

  std::string plain_output;
  ASSERT_NO_FATAL_FAILURE(CheckPlaintextTokenServer(*dir_, good_file, bad_file,
                                                    env, &plain_output));

  for (const std::string& output :
       {server.process.Output(), plain_output, runs.refused.output,
        runs.traced.output, runs.trained.output}) {
    EXPECT_THAT(output, Not(HasSubstr(good)));
    EXPECT_THAT(output, Not(HasSubstr(bad)));
    EXPECT_THAT(output, Not(HasSubstr("7f3a9c2e")));
  }
}

TEST_F(TlsIntegrationTest, RotatedCertificatesAreUsedWithoutRestart) {
  // The server reads its files through a symlinked folder, swapped in one
  // rename -- how Kubernetes updates a mounted Secret.
  const std::string live = *dir_ + "/live";
  ASSERT_EQ(symlink(a_->dir.c_str(), live.c_str()), 0);
  ServerProcess server = StartServer(
      {"--tls_cert=" + live + "/server.pem",
       "--tls_key=" + live + "/server.key", "--tls_ca=" + live + "/ca.pem",
       "--tls_refresh_s=1", "--workers=1"},
      *dir_);
  ASSERT_FALSE(server.address.empty()) << server.process.Output();
  EXPECT_TRUE(CallGetStatus(*Stub(server.address, a_->Client("worker"))).ok());
  // Only set B's CA signs this client, and only B's CA signs the server
  // certificate it expects.
  const TlsOptions new_client = b_->Client("worker");
  EXPECT_EQ(
      CallGetStatus(*Stub(server.address, new_client), absl::Seconds(5)).code(),
      absl::StatusCode::kUnavailable);

  const std::string next = *dir_ + "/live.next";
  ASSERT_EQ(symlink(b_->dir.c_str(), next.c_str()), 0);
  ASSERT_EQ(rename(next.c_str(), live.c_str()), 0);
  const absl::Time deadline = absl::Now() + absl::Seconds(20);
  absl::Status status;
  while (true) {
    // A new channel, so a new handshake, each time.
    status = CallGetStatus(*Stub(server.address, new_client), absl::Seconds(2));
    if (status.ok() || absl::Now() > deadline) break;
    absl::SleepFor(absl::Milliseconds(50));  // Polls; the deadline bounds it.
  }
  EXPECT_TRUE(status.ok()) << status;
  EXPECT_FALSE(server.process.Wait(absl::ZeroDuration()).has_value())
      << "the server restarted or died";
  // The old CA's clients are out.
  EXPECT_EQ(CallGetStatus(*Stub(server.address, a_->Client("worker")),
                          absl::Seconds(5))
                .code(),
            absl::StatusCode::kUnavailable);
}

}  // namespace
}  // namespace lockstep
