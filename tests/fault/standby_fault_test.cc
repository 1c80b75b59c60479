// Standby failover (lockstep_server --replicas=2 and --standby_of, docs/
// faults.md "Standby failover"): a primary SIGKILLed mid-job is replaced by
// its standby at the version the job is at. The workers fail over by
// themselves, no applied step is thrown away (each worker's applied steps
// equal the final version), and the weights equal a fault-free run's.
#include <signal.h>

#include <string>
#include <vector>

#include "absl/strings/numbers.h"
#include "absl/strings/str_cat.h"
#include "gmock/gmock.h"
#include "gtest/gtest.h"
#include "tests/fault/fault_flags.h"
#include "tests/fault/job.h"
#include "tests/integration/subprocess.h"

namespace lockstep {
namespace {

using ::testing::HasSubstr;
using ::testing::Not;

// The integer after the first `before` in `text` (up to a character that
// is not a digit), or -1.
int64_t NumberAfter(const std::string& text, const std::string& before) {
  const size_t at = text.find(before);
  if (at == std::string::npos) return -1;
  const size_t start = text.find_first_not_of(' ', at + before.size());
  const size_t end = text.find_first_not_of("0123456789", start);
  int64_t value = -1;
  if (!absl::SimpleAtoi(text.substr(start, end - start), &value)) return -1;
  return value;
}

// `key`'s integer in a worker's --summary_json, or -1.
int64_t SummaryValue(const std::string& json, const std::string& key) {
  return NumberAfter(json, absl::StrCat("\"", key, "\":"));
}

// The workers' --push_window: "auto" (every chunk of the small model in
// flight at once), and 1, where a worker pushes its next chunk only once
// the last one is answered: the primary, holding a chunk's answer until
// the standby holds that chunk's version, must not wait for the step's
// other chunks, which the worker has not pushed yet.
class StandbyFaultTest : public ::testing::TestWithParam<const char*> {};

TEST_P(StandbyFaultTest, KilledPrimaryIsReplacedByItsStandbyWithNoStepRedone) {
  Job job(2);
  job.StartServer({"--replicas=2"});
  job.StartStandby({});
  std::vector<std::string> summaries;
  for (int r = 0; r < 2; ++r) {
    summaries.push_back(absl::StrCat(job.dir(), "/summary", r, ".json"));
    std::vector<std::string> extra = {
        "--summary_json=" + summaries.back(),
        absl::StrCat("--push_window=", GetParam())};
    if (r == 1) extra.push_back("--straggle=1:50");
    job.StartWorker(r, Flags(extra));
  }
  ASSERT_TRUE(job.WaitForServerLog("follows from version"))
      << job.ServerOutput() << job.StandbyOutput();
  ASSERT_TRUE(job.WaitForVersion(8)) << job.ServerOutput();
  job.Signal(job.server(), SIGKILL);
  EXPECT_EQ(job.WaitWorker(0), 0) << job.WorkerOutput(0);
  EXPECT_EQ(job.WaitWorker(1), 0) << job.WorkerOutput(1);
  EXPECT_EQ(job.WaitStandby(), 0) << job.StandbyOutput();

  // "took over from HOST:PORT at version V, ..."
  const std::string standby = job.StandbyOutput();
  const size_t line = standby.find("took over from");
  ASSERT_NE(line, std::string::npos) << standby;
  const int64_t took_over = NumberAfter(standby.substr(line), " at version ");
  EXPECT_GE(took_over, 8);
  EXPECT_LT(took_over, 40);  // Mid-job, so that failing over was needed.
  for (int r = 0; r < 2; ++r) {
    EXPECT_THAT(job.WorkerOutput(r), HasSubstr("registering again"));
    const std::string summary = ReadFile(summaries[r]);
    ASSERT_FALSE(summary.empty()) << job.WorkerOutput(r);
    // A step back (a restart from a checkpoint) would apply more steps than
    // the job has versions.
    EXPECT_EQ(SummaryValue(summary, "final_version"), 40) << summary;
    EXPECT_EQ(SummaryValue(summary, "steps"), 40) << summary;
  }
  EXPECT_EQ(job.Weights(0), Reference());
  EXPECT_EQ(job.Weights(1), Reference());
}

INSTANTIATE_TEST_SUITE_P(PushWindows, StandbyFaultTest,
                         ::testing::Values("auto", "1"));

// A worker restarted after a failover names the old primary -- a standby
// now -- first. While its primary answers, a standby refuses Register at
// once rather than holding it until it takes over: with a connect timeout
// shorter than a replica's 2 s slice, only that lets the worker in.
TEST(StandbyRefusalTest, AWorkerNamingTheStandbyFirstIsSentOnAtOnce) {
  Job job(2);
  job.StartServer({"--replicas=2"});
  job.StartStandby({});
  job.StartWorker(0, Flags());
  job.StartWorker(
      1, Flags({absl::StrCat("--servers=127.0.0.1:", job.standby_port()),
                absl::StrCat("--standby_servers=127.0.0.1:", job.port()),
                "--connect_timeout_s=1"}));
  EXPECT_EQ(job.WaitWorker(1), 0) << job.WorkerOutput(1);
  EXPECT_EQ(job.WaitWorker(0), 0) << job.WorkerOutput(0);
  EXPECT_EQ(job.WaitStandby(), 0) << job.StandbyOutput();
  EXPECT_THAT(job.StandbyOutput(), Not(HasSubstr("took over")));
  EXPECT_EQ(job.Weights(0), Reference());
  EXPECT_EQ(job.Weights(1), Reference());
}

TEST(StandbyRefusalTest, StandbyOfAServerWithoutReplicasIsRefused) {
  Job job(1);
  job.StartServer({});
  job.StartStandby({});
  EXPECT_EQ(job.WaitStandby(), 2) << job.StandbyOutput();
  EXPECT_THAT(job.StandbyOutput(), HasSubstr("--replicas=2"));
  job.Signal(job.server(), SIGTERM);
  EXPECT_EQ(job.WaitServer(), 0) << job.ServerOutput();
}

}  // namespace
}  // namespace lockstep
