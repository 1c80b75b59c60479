#include "common/formats/tf_config.h"

#include <map>
#include <string>
#include <vector>

#include "absl/status/status.h"
#include "absl/status/statusor.h"
#include "gmock/gmock.h"
#include "gtest/gtest.h"

namespace lockstep {
namespace {

using ::testing::ElementsAre;
using ::testing::HasSubstr;
using ::testing::IsEmpty;

// What Kubeflow's TFJob operator sets for worker 1 of a job with one
// parameter server and three workers (it adds "environment" too).
constexpr char kTfJobWorker[] = R"json({
  "cluster": {
    "ps": ["job-ps-0.ns.svc:2222"],
    "worker": ["job-worker-0.ns.svc:2222", "job-worker-1.ns.svc:2222",
               "job-worker-2.ns.svc:2222"]
  },
  "task": {"type": "worker", "index": 1},
  "environment": "cloud"
})json";

// A chief plus two workers and two parameter servers.
std::string WithChief(const std::string& type, const std::string& index) {
  return R"({"cluster": {"chief": ["c0:2222"], "worker": ["w0:2222", "w1:2222"],
                         "ps": ["p0:2222", "p1:2222"]},
             "task": {"type": ")" +
         type + R"(", "index": )" + index + "}}";
}

TfConfig MustParse(const std::string& json) {
  absl::StatusOr<TfConfig> config = ParseTfConfig(json);
  EXPECT_TRUE(config.ok()) << config.status() << "\n" << json;
  return config.ok() ? *config : TfConfig();
}

// Expects INVALID_ARGUMENT with `what` in the message.
void ExpectMalformed(const std::string& json, const std::string& what) {
  absl::StatusOr<TfConfig> config = ParseTfConfig(json);
  ASSERT_FALSE(config.ok()) << json;
  EXPECT_EQ(config.status().code(), absl::StatusCode::kInvalidArgument)
      << json;
  EXPECT_THAT(config.status().message(), HasSubstr("malformed TF_CONFIG"))
      << json;
  EXPECT_THAT(config.status().message(), HasSubstr(what)) << json;
}

TEST(TfConfigTest, ParsesTfJobWorker) {
  const TfConfig config = MustParse(kTfJobWorker);
  const std::map<std::string, std::vector<std::string>> expected = {
      {"ps", {"job-ps-0.ns.svc:2222"}},
      {"worker",
       {"job-worker-0.ns.svc:2222", "job-worker-1.ns.svc:2222",
        "job-worker-2.ns.svc:2222"}}};
  EXPECT_EQ(config.cluster, expected);
  EXPECT_EQ(config.task_type, "worker");
  EXPECT_EQ(config.task_index, 1);
  EXPECT_THAT(config.PsAddresses(), ElementsAre("job-ps-0.ns.svc:2222"));
  EXPECT_EQ(config.NumWorkers(), 3);
  absl::StatusOr<int> rank = config.WorkerRank();
  ASSERT_TRUE(rank.ok()) << rank.status();
  EXPECT_EQ(*rank, 1);
}

TEST(TfConfigTest, ChiefTakesRankZeroAndWorkersFollow) {
  struct Case {
    const char* type;
    const char* index;
    int rank;
  };
  for (const Case& c : std::vector<Case>{
           {"chief", "0", 0}, {"worker", "0", 1}, {"worker", "1", 2}}) {
    const TfConfig config = MustParse(WithChief(c.type, c.index));
    EXPECT_EQ(config.NumWorkers(), 3);
    EXPECT_THAT(config.PsAddresses(), ElementsAre("p0:2222", "p1:2222"));
    absl::StatusOr<int> rank = config.WorkerRank();
    ASSERT_TRUE(rank.ok()) << rank.status();
    EXPECT_EQ(*rank, c.rank) << c.type << " " << c.index;
  }
}

TEST(TfConfigTest, PsTaskHasNoWorkerRank) {
  const TfConfig config = MustParse(WithChief("ps", "1"));
  EXPECT_EQ(config.task_type, "ps");
  EXPECT_EQ(config.task_index, 1);
  absl::StatusOr<int> rank = config.WorkerRank();
  EXPECT_EQ(rank.status().code(), absl::StatusCode::kInvalidArgument);
  EXPECT_THAT(rank.status().message(), HasSubstr("\"ps\""));
}

TEST(TfConfigTest, EvaluatorIsNotAWorker) {
  const TfConfig config = MustParse(R"({
      "cluster": {"worker": ["w0:1"], "evaluator": ["e0:1"]},
      "task": {"type": "evaluator", "index": 0}})");
  EXPECT_EQ(config.NumWorkers(), 1);
  EXPECT_THAT(config.PsAddresses(), IsEmpty());
  EXPECT_EQ(config.WorkerRank().status().code(),
            absl::StatusCode::kInvalidArgument);
}

TEST(TfConfigTest, IndexDefaultsToZero) {
  const TfConfig config = MustParse(
      R"({"cluster": {"worker": ["w0:1", "w1:1"]}, "task": {"type": "worker"}})");
  EXPECT_EQ(config.task_index, 0);
  EXPECT_THAT(config.PsAddresses(), IsEmpty());
  EXPECT_EQ(config.NumWorkers(), 2);
  absl::StatusOr<int> rank = config.WorkerRank();
  ASSERT_TRUE(rank.ok()) << rank.status();
  EXPECT_EQ(*rank, 0);
}

TEST(TfConfigTest, EmptyChiefListDoesNotShiftRanks) {
  const TfConfig config = MustParse(
      R"({"cluster": {"chief": [], "worker": ["w0:1", "w1:1"]},
          "task": {"type": "worker", "index": 1}})");
  EXPECT_EQ(config.NumWorkers(), 2);
  absl::StatusOr<int> rank = config.WorkerRank();
  ASSERT_TRUE(rank.ok()) << rank.status();
  EXPECT_EQ(*rank, 1);
}

TEST(TfConfigTest, RejectsNonJson) {
  ExpectMalformed("", "not a JSON object");
  ExpectMalformed("cluster: {}", "not a JSON object");
  ExpectMalformed(R"({"cluster": {"worker": ["w0:1"]}, "task": )",
                  "not a JSON object");
}

TEST(TfConfigTest, RejectsJsonThatIsNotAnObject) {
  ExpectMalformed("[1, 2]", "not a JSON object");
  ExpectMalformed("42", "not a JSON object");
  ExpectMalformed(R"("worker")", "not a JSON object");
}

TEST(TfConfigTest, RejectsMissingCluster) {
  ExpectMalformed(R"({"task": {"type": "worker", "index": 0}})",
                  "missing object \"cluster\"");
  ExpectMalformed(R"({"cluster": ["w0:1"], "task": {"type": "worker"}})",
                  "missing object \"cluster\"");
}

TEST(TfConfigTest, RejectsClusterEntryThatIsNotAList) {
  ExpectMalformed(
      R"({"cluster": {"worker": ["w0:1"], "ps": "p0:1"},
          "task": {"type": "worker"}})",
      "cluster.ps is not a list");
}

TEST(TfConfigTest, RejectsNonStringOrEmptyAddress) {
  ExpectMalformed(
      R"({"cluster": {"worker": ["w0:1", 2222]}, "task": {"type": "worker"}})",
      "cluster.worker holds a non-string or empty address");
  ExpectMalformed(
      R"({"cluster": {"worker": [""]}, "task": {"type": "worker"}})",
      "cluster.worker holds a non-string or empty address");
}

TEST(TfConfigTest, RejectsMissingTask) {
  ExpectMalformed(R"({"cluster": {"worker": ["w0:1"]}})",
                  "missing object \"task\"");
  ExpectMalformed(R"({"cluster": {"worker": ["w0:1"]}, "task": "worker"})",
                  "missing object \"task\"");
}

TEST(TfConfigTest, RejectsTaskTypeThatIsNotAString) {
  ExpectMalformed(R"({"cluster": {"worker": ["w0:1"]}, "task": {"index": 0}})",
                  "task.type is missing or not a string");
  ExpectMalformed(
      R"({"cluster": {"worker": ["w0:1"]}, "task": {"type": 1, "index": 0}})",
      "task.type is missing or not a string");
}

TEST(TfConfigTest, RejectsBadIndex) {
  const std::string prefix =
      R"({"cluster": {"worker": ["w0:1", "w1:1"]}, "task": {"type": "worker", "index": )";
  ExpectMalformed(prefix + "-1}}", "task.index is not a non-negative integer");
  ExpectMalformed(prefix + "0.5}}", "task.index is not a non-negative integer");
  ExpectMalformed(prefix + "1e9}}", "task.index is not a non-negative integer");
  ExpectMalformed(prefix + R"("1"}})", "task.index is not a number");
  ExpectMalformed(prefix + "2}}",
                  "task.index 2 is out of range for cluster.worker (2 entries)");
}

TEST(TfConfigTest, RejectsTaskTypeAbsentFromCluster) {
  ExpectMalformed(
      R"({"cluster": {"worker": ["w0:1"], "ps": ["p0:1"]},
          "task": {"type": "chief", "index": 0}})",
      "task.type \"chief\" has no list in cluster");
}

}  // namespace
}  // namespace lockstep
