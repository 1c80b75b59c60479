// Training over mutual TLS ends with the same weights as in plaintext, and
// lockstep_launch --tls runs a job over mutual TLS.
#include <string>
#include <vector>

#include "absl/strings/str_cat.h"
#include "absl/strings/str_join.h"
#include "common/security/tls.h"
#include "gmock/gmock.h"
#include "gtest/gtest.h"
#include "tests/integration/subprocess.h"
#include "tests/security/security_test_util.h"

namespace lockstep {
namespace {

using ::testing::HasSubstr;
using ::testing::Not;

const std::string kBin = LOCKSTEP_BIN_DIR;
constexpr int kWorkers = 2;

// Trains kWorkers workers for 20 steps with server flags `server_flags` and
// worker flags `worker_flags`; returns rank 0's final weights (and checks
// every rank has the same).
std::string Train(const std::string& dir, const std::string& name,
                  const std::vector<std::string>& server_flags,
                  const std::vector<std::string>& worker_flags) {
  std::vector<std::string> flags = server_flags;
  flags.push_back(absl::StrCat("--workers=", kWorkers));
  ServerProcess server = StartServer(flags, dir);
  EXPECT_FALSE(server.address.empty()) << server.process.Output();
  std::vector<Subprocess> workers;
  for (int rank = 0; rank < kWorkers; ++rank) {
    std::vector<std::string> argv = {
        kBin + "/lockstep_worker",
        "--servers=" + server.address,
        absl::StrCat("--workers=", kWorkers),
        absl::StrCat("--rank=", rank),
        "--dataset=synthetic",
        "--synthetic_examples=2560",
        "--max_steps=20",
        "--batch_size=32",
        "--layers=784,64,10",
        "--progress=none",
        "--connect_timeout_s=30",
        absl::StrCat("--dump_weights=", dir, "/", name, rank, ".bin")};
    argv.insert(argv.end(), worker_flags.begin(), worker_flags.end());
    workers.push_back(Subprocess::Start(argv));
  }
  for (Subprocess& w : workers) {
    EXPECT_EQ(w.Wait(absl::Seconds(120)), 0) << w.Output();
  }
  EXPECT_EQ(server.process.Wait(absl::Seconds(30)), 0)
      << server.process.Output();
  const std::string weights = ReadFile(absl::StrCat(dir, "/", name, "0.bin"));
  for (int rank = 1; rank < kWorkers; ++rank) {
    EXPECT_EQ(ReadFile(absl::StrCat(dir, "/", name, rank, ".bin")), weights);
  }
  return weights;
}

TEST(TlsTrainingTest, MutualTlsGivesTheSameWeightsAsPlaintext) {
  const std::string dir = MakeTempDir();
  CertSet certs;
  ASSERT_TRUE(MakeCertSet(dir, "certs", &certs).ok());
  const std::string plain = Train(dir, "plain", {}, {});
  const std::string tls = Train(dir, "tls", certs.ServerFlags(),
                                {"--tls_cert=" + certs.File("worker.pem"),
                                 "--tls_key=" + certs.File("worker.key"),
                                 "--tls_ca=" + certs.File("ca.pem")});
  ASSERT_EQ(plain.size(), (784 * 64 + 64 + 64 * 10 + 10) * sizeof(float));
  // Two addends sum the same in either order: bit for bit.
  EXPECT_TRUE(plain == tls) << "the weights differ";
}

TEST(TlsTrainingTest, LauncherRunsTheJobOverMutualTls) {
  const std::string dir = MakeTempDir();
  CertSet certs;
  ASSERT_TRUE(MakeCertSet(dir, "certs", &certs).ok());
  RunResult r = RunProcess(
      {kBin + "/lockstep_launch", "--tls", "--tls_dir=" + certs.dir,
       "--workers=2", "--dataset=synthetic", "--synthetic_examples=640",
       "--max_steps=5", "--layers=784,16,10", "--progress=none"},
      {}, absl::Seconds(120));
  EXPECT_EQ(r.exit_code, 0) << r.output;
  EXPECT_THAT(r.output, HasSubstr("(mutual TLS)"));
  // The gRPC ring's workers call each other with the worker certificate,
  // the one name their ring takes chunks from.
  RunResult ring =
      RunProcess({kBin + "/lockstep_launch", "--tls", "--tls_dir=" + certs.dir,
                  "--workers=2", "--sync=allreduce", "--allreduce=grpc-ring",
                  "--dataset=synthetic", "--synthetic_examples=640",
                  "--max_steps=5", "--layers=784,16,10", "--progress=none"},
                 {}, absl::Seconds(120));
  EXPECT_EQ(ring.exit_code, 0) << ring.output;

  RunResult missing =
      RunProcess({kBin + "/lockstep_launch", "--tls",
                  "--tls_dir=" + dir + "/nothing", "--workers=1"},
                 {}, absl::Seconds(30));
  EXPECT_EQ(missing.exit_code, 2);  // A configuration error: permanent.
  EXPECT_THAT(missing.output, HasSubstr("make_certs.sh"));
}

// Every tracer the token check lets through, all at once and at DEBUG
// verbosity, over mutual TLS (where secure_endpoint would print the
// decrypted bytes) and in plaintext on loopback (where tcp would print
// them): a job trains and the token is nowhere in its output. One tracer
// that prints it is refused before the token is read.
TEST(TlsTrainingTest, AllowedTracersKeepTheTokenOutOfTheLogs) {
  const std::string dir = MakeTempDir();
  CertSet certs;
  ASSERT_TRUE(MakeCertSet(dir, "certs", &certs).ok());
  const std::string token = "tracer-token-5f3a9c1e7b2d4068";
  const std::string token_file = dir + "/token";
  WriteFileOrDie(token_file, token + "\n");
  const std::vector<std::string> traced = {
      "GRPC_VERBOSITY=DEBUG",
      "GRPC_TRACE=" + absl::StrJoin(QuietGrpcTracers(), ",")};
  const std::vector<std::string> tls_client = {
      "--tls_cert=" + certs.File("worker.pem"),
      "--tls_key=" + certs.File("worker.key"),
      "--tls_ca=" + certs.File("ca.pem")};
  for (bool tls : {true, false}) {
    std::vector<std::string> server_flags = {"--workers=1",
                                             "--token_file=" + token_file};
    if (tls) {
      for (const std::string& f : certs.ServerFlags())
        server_flags.push_back(f);
    }
    ServerProcess server = StartServer(server_flags, dir, traced);
    ASSERT_FALSE(server.address.empty()) << server.process.Output();
    std::vector<std::string> worker = {kBin + "/lockstep_worker",
                                       "--servers=" + server.address,
                                       "--workers=1",
                                       "--rank=0",
                                       "--dataset=synthetic",
                                       "--synthetic_examples=640",
                                       "--max_steps=3",
                                       "--progress=none",
                                       "--token_file=" + token_file};
    if (tls) worker.insert(worker.end(), tls_client.begin(), tls_client.end());
    const RunResult trained = RunProcess(worker, traced, absl::Seconds(120));
    EXPECT_EQ(trained.exit_code, 0) << trained.output;
    EXPECT_EQ(server.process.Wait(absl::Seconds(30)), 0);
    const std::string server_output = server.process.Output();
    // The tracers did run: gRPC's debug lines are there.
    EXPECT_THAT(trained.output + server_output, HasSubstr("trace.cc"));
    EXPECT_THAT(trained.output, HasSubstr("Trained 3 steps"));
    EXPECT_THAT(trained.output, Not(HasSubstr(token))) << "tls " << tls;
    EXPECT_THAT(server_output, Not(HasSubstr(token))) << "tls " << tls;

    const RunResult leaky =
        RunProcess(worker, {"GRPC_TRACE=timer,tcp"}, absl::Seconds(60));
    EXPECT_EQ(leaky.exit_code, 2) << leaky.output;
    EXPECT_THAT(leaky.output, HasSubstr("the \"tcp\" tracer"));
  }
}

}  // namespace
}  // namespace lockstep
