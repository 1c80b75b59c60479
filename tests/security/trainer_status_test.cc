// Rank 0's reports to a Kubeflow Trainer TrainJob status endpoint
// (worker/app/trainer_status.h) against a local HTTPS stub of it
// (trainer_status_stub.py, with make_certs.sh's server certificate): every
// report carries the projected token and the proposal's fields, the last
// says 100% with the job's own step count and test figures; a refused
// token costs one warning, not the job; a server the CA did not sign is
// refused before anything is sent.
#include <fstream>
#include <string>
#include <vector>

#include "absl/strings/ascii.h"
#include "absl/strings/str_cat.h"
#include "absl/strings/str_split.h"
#include "common/base/exit_codes.h"
#include "common/security/https_post.h"
#include "gmock/gmock.h"
#include "gtest/gtest.h"
#include "nlohmann/json.hpp"
#include "tests/integration/subprocess.h"
#include "tests/security/security_test_util.h"

namespace lockstep {
namespace {

using ::testing::HasSubstr;
using ::testing::MatchesRegex;
using ::testing::Not;

const std::string kBin = LOCKSTEP_BIN_DIR;
constexpr char kPath[] =
    "/apis/trainer.kubeflow.org/v1alpha1/namespaces/ml/trainjobs/mnist/status";

// The stub on a free port, answering `token`; its log is `out`.
struct Stub {
  Subprocess process;
  std::string url;  // Empty when it did not come up.
  std::string out;
};

Stub StartStub(const CertSet& certs, const std::string& dir,
               const std::string& token) {
  const std::string port_file = dir + "/stub.port";
  Stub stub{
      Subprocess::Start({"/usr/bin/python3",
                         std::string(LOCKSTEP_SOURCE_DIR) +
                             "/tests/security/trainer_status_stub.py",
                         certs.File("server.pem"), certs.File("server.key"),
                         token, port_file, dir + "/stub.jsonl"}),
      "", dir + "/stub.jsonl"};
  const absl::Time deadline = absl::Now() + absl::Seconds(20);
  std::string port;
  while (port.empty() && absl::Now() < deadline &&
         !stub.process.Wait(absl::Milliseconds(20)).has_value()) {
    port = ReadFile(port_file);
  }
  if (!port.empty()) {
    stub.url = absl::StrCat(
        "https://127.0.0.1:", absl::StripAsciiWhitespace(port), kPath);
  }
  return stub;
}

// Every request the stub answered: {"path", "status", "body"}.
std::vector<nlohmann::json> Requests(const Stub& stub) {
  std::vector<nlohmann::json> out;
  for (absl::string_view line :
       absl::StrSplit(ReadFile(stub.out), '\n', absl::SkipEmpty())) {
    out.push_back(nlohmann::json::parse(line));
  }
  return out;
}

std::string Metric(const nlohmann::json& status, const std::string& name) {
  for (const nlohmann::json& m : status["metrics"]) {
    if (m["name"] == name) return m["value"];
  }
  return "";
}

// A 20-step job of one worker and one server, rank 0 told the endpoint.
RunResult TrainReporting(const std::string& dir, const Stub& stub,
                         const std::string& token_file, const CertSet& certs) {
  ServerProcess server = StartServer({"--workers=1"}, dir);
  if (server.address.empty()) return RunResult{-1, server.process.Output()};
  return RunProcess(
      {kBin + "/lockstep_worker", "--servers=" + server.address, "--workers=1",
       "--rank=0", "--dataset=synthetic", "--synthetic_examples=320",
       "--layers=12,8,3", "--batch_size=32", "--epochs=2",
       "--trainer_status_every_s=0", "--progress=none"},
      {"KUBEFLOW_TRAINER_STATUS_SERVER_URL=" + stub.url,
       "KUBEFLOW_TRAINER_STATUS_SERVER_CA_CERT=" + certs.File("ca.pem"),
       "KUBEFLOW_TRAINER_STATUS_SERVER_TOKEN=" + token_file},
      absl::Seconds(60));
}

TEST(TrainerStatusTest, RankZeroReportsProgressEtaAndTheTestFigures) {
  const std::string dir = MakeTempDir();
  CertSet certs;
  ASSERT_TRUE(MakeCertSet(dir, "certs", &certs).ok());
  const std::string token = "eyJhbGciOiJSUzI1NiJ9.projected.token";
  const std::string token_file = dir + "/token";
  std::ofstream(token_file) << token << "\n";
  Stub stub = StartStub(certs, dir, token);
  ASSERT_FALSE(stub.url.empty()) << stub.process.Output();
  const RunResult run = TrainReporting(dir, stub, token_file, certs);
  ASSERT_EQ(run.exit_code, kExitOk) << run.output;
  EXPECT_THAT(run.output, Not(HasSubstr("cannot report progress")));

  const std::vector<nlohmann::json> requests = Requests(stub);
  // The first step's and the end's at least (a step's report waits for
  // the post before it, and only the newest waits).
  ASSERT_GE(requests.size(), 2u) << ReadFile(stub.out);
  int last_progress = -1;
  for (const nlohmann::json& r : requests) {
    EXPECT_EQ(r["path"], kPath);
    EXPECT_EQ(r["status"], 200) << "refused: " << r.dump();
    const nlohmann::json body = nlohmann::json::parse(std::string(r["body"]));
    const nlohmann::json& status = body["trainerStatus"];
    const int progress = status["progressPercentage"];
    EXPECT_GE(progress, last_progress) << "progress went back";
    EXPECT_LE(progress, 100);
    last_progress = progress;
    if (status.contains("estimatedRemainingSeconds")) {
      EXPECT_GE(status["estimatedRemainingSeconds"].get<int64_t>(), 0);
    }
    EXPECT_THAT(std::string(status["lastUpdatedTime"]),
                MatchesRegex("20[0-9][0-9]-[01][0-9]-[0-3][0-9]T[0-2][0-9]:"
                             "[0-5][0-9]:[0-5][0-9]Z"));
    EXPECT_EQ(Metric(status, "totalSteps"), "20");
    EXPECT_EQ(Metric(status, "totalEpochs"), "2");
    EXPECT_FALSE(Metric(status, "loss").empty());
  }
  const nlohmann::json last = nlohmann::json::parse(
      std::string(requests.back()["body"]))["trainerStatus"];
  EXPECT_EQ(last["progressPercentage"], 100);
  EXPECT_EQ(last["estimatedRemainingSeconds"], 0);
  EXPECT_EQ(Metric(last, "currentStep"), "20");
  EXPECT_EQ(Metric(last, "currentEpoch"), "2");
  // The test figures the worker printed, to the printed digits.
  const std::string printed = run.output.substr(
      run.output.find("Test accuracy ") + std::string("Test accuracy ").size(),
      6);
  EXPECT_EQ(Metric(last, "test_accuracy"), printed) << run.output;
  EXPECT_FALSE(Metric(last, "test_loss").empty());
}

TEST(TrainerStatusTest, ARefusedTokenCostsOneWarningNotTheJob) {
  const std::string dir = MakeTempDir();
  CertSet certs;
  ASSERT_TRUE(MakeCertSet(dir, "certs", &certs).ok());
  const std::string token_file = dir + "/token";
  std::ofstream(token_file) << "a-token-of-another-pod\n";
  Stub stub = StartStub(certs, dir, "the-right-token");
  ASSERT_FALSE(stub.url.empty()) << stub.process.Output();
  const RunResult run = TrainReporting(dir, stub, token_file, certs);
  EXPECT_EQ(run.exit_code, kExitOk) << run.output;
  const std::vector<nlohmann::json> requests = Requests(stub);
  ASSERT_GE(requests.size(), 2u);
  for (const nlohmann::json& r : requests) EXPECT_EQ(r["status"], 401);
  const std::string warning = "the endpoint answered HTTP 401";
  const size_t first = run.output.find(warning);
  ASSERT_NE(first, std::string::npos) << run.output;
  EXPECT_EQ(run.output.find(warning, first + 1), std::string::npos)
      << "said more than once:\n"
      << run.output;
}

TEST(TrainerStatusTest, AServerTheCaDidNotSignGetsNothing) {
  const std::string dir = MakeTempDir();
  CertSet certs, other;
  ASSERT_TRUE(MakeCertSet(dir, "certs", &certs).ok());
  ASSERT_TRUE(MakeCertSet(dir, "other", &other).ok());
  Stub stub = StartStub(certs, dir, "t");
  ASSERT_FALSE(stub.url.empty()) << stub.process.Output();
  HttpsPostRequest request;
  request.url = stub.url;
  request.ca_file = other.File("ca.pem");
  request.bearer_token = "t";
  request.body = "{}";
  const absl::StatusOr<int> refused = HttpsPost(request);
  EXPECT_EQ(refused.status().code(), absl::StatusCode::kUnavailable);
  EXPECT_THAT(refused.status().message(), HasSubstr("certificate"));
  request.ca_file = certs.File("ca.pem");
  const absl::StatusOr<int> accepted = HttpsPost(request);
  ASSERT_TRUE(accepted.ok()) << accepted.status();
  EXPECT_EQ(*accepted, 200);
  EXPECT_EQ(Requests(stub).size(), 1u) << "the refused post reached it";
  request.url = "http://127.0.0.1:1/status";
  EXPECT_EQ(HttpsPost(request).status().code(),
            absl::StatusCode::kInvalidArgument);
}

}  // namespace
}  // namespace lockstep
