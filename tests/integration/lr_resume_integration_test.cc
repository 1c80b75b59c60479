// Learning-rate schedules and resumed jobs through real lockstep_server and
// lockstep_worker processes on loopback: a schedule applies the same on the
// servers and in all-reduce, and a job trained one epoch and then resumed
// to two (from its checkpoint folder, or another job's with --init_from)
// ends with the weights of two epochs straight.
#include <cstdint>
#include <string>
#include <vector>

#include "absl/strings/str_cat.h"
#include "gmock/gmock.h"
#include "gtest/gtest.h"
#include "tests/integration/resume_jobs.h"
#include "tests/integration/subprocess.h"
#include "tests/integration/training_jobs.h"

namespace lockstep {
namespace {

using ::testing::ElementsAre;
using ::testing::HasSubstr;

// 20 SGD steps: warmup over 3, then 0.1 up to step 5 of the schedule, 0.02
// up to 10, 0.005 after.
const std::vector<std::string> kPiecewise = {
    "--lr_schedule=piecewise", "--lr_boundaries=5,10",
    "--lr_values=0.1,0.02,0.005", "--lr_warmup_steps=3"};

std::vector<std::string> With(std::vector<std::string> flags,
                              const std::vector<std::string>& more) {
  flags.insert(flags.end(), more.begin(), more.end());
  return flags;
}

TEST(LrScheduleTrainingTest, ServersAndAllReduceApplyTheSameSchedule) {
  const std::vector<float> ps = Train(2, 8, "sgd", 2, kPiecewise);
  const std::vector<float> allreduce =
      Train(2, 8, "sgd", 1, With(kPiecewise, {"--sync=allreduce"}));
  ASSERT_EQ(allreduce.size(), ps.size());
  EXPECT_LE(MaxRelativeDifference(allreduce, ps), 1e-6);
  // The schedule is applied: the constant first rate trains otherwise.
  const std::vector<float> constant = Train(2, 8, "sgd", 2, {"--lr=0.1"});
  ASSERT_EQ(constant.size(), ps.size());
  EXPECT_GT(MaxRelativeDifference(constant, ps), 1e-3);
}

TEST(LrScheduleTrainingTest, SummaryReportsTheLastStepsRate) {
  const std::vector<std::string> summaries =
      RunJob(2, With(kPiecewise, {"--optimizer=sgd"}));
  for (const std::string& summary : summaries) {
    EXPECT_EQ(JsonInt(summary, "final_version"), 20) << summary;
    // Step 19 is step 16 of the schedule, past both boundaries.
    EXPECT_THAT(summary, HasSubstr("\"final_learning_rate\": 0.005"));
  }
}

TEST(LrScheduleTrainingTest, AWorkerWithAnotherScheduleIsRefused) {
  const std::string dir = MakeTempDir();
  std::vector<Server> servers;
  servers.push_back(StartServer(2, dir));
  const std::vector<std::string> common = {kBin + "/lockstep_worker",
                                           "--servers=" + servers[0].address,
                                           "--workers=2",
                                           "--dataset=synthetic",
                                           "--synthetic_examples=640",
                                           "--layers=23,17,5",
                                           "--optimizer=sgd",
                                           "--batch_size=8",
                                           "--max_steps=5",
                                           "--progress=none",
                                           "--connect_timeout_s=30"};
  Subprocess rank0 =
      Subprocess::Start(With(common, With(kPiecewise, {"--rank=0"})));
  RunResult rank1 = RunProcess(
      With(common, {"--rank=1", "--lr_schedule=cosine", "--lr_decay_steps=20"}),
      {}, kDeadline);
  EXPECT_NE(rank1.exit_code, 0);
  EXPECT_THAT(rank1.output, HasSubstr("model signature differs"));
  EXPECT_THAT(rank1.output, HasSubstr("lr_schedule=piecewise("));
  EXPECT_THAT(rank1.output, HasSubstr("lr_schedule=cosine("));
  rank0.Kill();
  servers[0].process.Kill();
}

TEST(ResumeTest, OneEpochThenResumedToTwoEqualsTwoStraight) {
  const ResumeJob straight = RunResumeJob(2, {});
  ASSERT_EQ(straight.weights.size(), size_t{23 * 17 + 17 + 17 * 5 + 5});
  EXPECT_THAT(straight.steps, ElementsAre(20, 20));
  const std::string first = MakeTempDir() + "/ckpt";
  const ResumeJob one = RunResumeJob(1, {"--checkpoint_dir=" + first});
  ASSERT_EQ(one.weights.size(), straight.weights.size());
  EXPECT_NE(one.weights, straight.weights);

  // A new job started from the first one's checkpoint folder: it takes the
  // second epoch's 10 steps only.
  const std::string second = MakeTempDir() + "/ckpt";
  const ResumeJob init =
      RunResumeJob(2, {"--checkpoint_dir=" + second, "--init_from=" + first});
  EXPECT_THAT(init.server_log,
              HasSubstr("starting from version 10 of " + first));
  EXPECT_THAT(init.steps, ElementsAre(10, 10));
  EXPECT_EQ(init.weights, straight.weights);
  // The first job itself, restarted on its folder with more epochs.
  const ResumeJob extended = RunResumeJob(2, {"--checkpoint_dir=" + first});
  EXPECT_THAT(extended.server_log, HasSubstr("restored version 10 from"));
  EXPECT_THAT(extended.steps, ElementsAre(10, 10));
  EXPECT_EQ(extended.weights, straight.weights);

  // A job may not end before where its checkpoint is (step 20 now).
  const std::string dir = MakeTempDir();
  Server server = StartServer(2, dir, 0, 1, {"--checkpoint_dir=" + first});
  RunResult shorter =
      RunProcess(ResumeWorker(server.address, 0, 1, dir + "/w"), {}, kDeadline);
  EXPECT_NE(shorter.exit_code, 0);
  EXPECT_THAT(
      shorter.output,
      HasSubstr("the restored job is at step 20, past the worker's 10"));
  server.process.Kill();
}

TEST(ResumeTest, InitFromNeedsACheckpoint) {
  const std::string dir = MakeTempDir();
  RunResult r = RunProcess({kBin + "/lockstep_server", "--listen=127.0.0.1:0",
                            "--workers=1", "--init_from=" + dir},
                           {}, kDeadline);
  EXPECT_EQ(r.exit_code, 2) << r.output;
  EXPECT_THAT(r.output, HasSubstr("no checkpoint of shard 0 of 1 in " + dir +
                                  "/shard-0-of-1"));
}

}  // namespace
}  // namespace lockstep
