// `lockstep_ctl reshard` through real processes: a job of two server shards
// trained one epoch and checkpointed, its checkpoints rewritten for three
// shards and for one, and each resumed to two epochs, ends with the weights
// of two epochs straight on one shard, bit for bit (Adam's slots and the
// schedule carry over, element by element, whatever the shards). The jobs
// are resume_jobs.h's.
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

RunResult Reshard(const std::string& from, const std::string& to, int shards) {
  return RunProcess(
      {kBin + "/lockstep_ctl", "reshard", from, to,
       absl::StrCat("--num_shards=", shards), "--chunk_bytes=1000"},
      {}, kDeadline);
}

TEST(ReshardTest, TwoShardsResumedOnThreeOrOneEqualTwoEpochsStraight) {
  const ResumeJob straight = RunResumeJob(2, {});
  ASSERT_EQ(straight.weights.size(), size_t{23 * 17 + 17 + 17 * 5 + 5});
  const std::string first = MakeTempDir() + "/ckpt";
  const ResumeJob one = RunResumeJob(1, {"--checkpoint_dir=" + first}, 2);
  ASSERT_EQ(one.weights.size(), straight.weights.size());
  EXPECT_NE(one.weights, straight.weights);

  for (int shards : {3, 1}) {
    SCOPED_TRACE(absl::StrCat(shards, " shard(s)"));
    const std::string to = MakeTempDir() + "/resharded";
    const RunResult r = Reshard(first, to, shards);
    ASSERT_EQ(r.exit_code, 0) << r.output;
    EXPECT_THAT(r.output,
                HasSubstr(absl::StrCat("version 10 of 2 shard(s) in ", first,
                                       ", resharded for ", shards)));
    const ResumeJob resumed = RunResumeJob(
        2, {"--checkpoint_dir=" + MakeTempDir() + "/ckpt", "--init_from=" + to},
        shards);
    EXPECT_THAT(resumed.server_log,
                HasSubstr("starting from version 10 of " + to));
    EXPECT_THAT(resumed.steps, ElementsAre(10, 10));
    EXPECT_EQ(resumed.weights, straight.weights);
  }

  // Refused: a folder that already holds checkpoints, one that holds no
  // job's, and no --num_shards.
  const std::string full = MakeTempDir() + "/full";
  ASSERT_EQ(Reshard(first, full, 3).exit_code, 0);
  const RunResult again = Reshard(first, full, 3);
  EXPECT_EQ(again.exit_code, 2) << again.output;
  EXPECT_THAT(again.output, HasSubstr("reshard into an empty folder"));
  const std::string empty = MakeTempDir();
  const RunResult none = Reshard(empty, MakeTempDir() + "/x", 3);
  EXPECT_EQ(none.exit_code, 2) << none.output;
  EXPECT_THAT(none.output, HasSubstr("no shard-I-of-S folders in " + empty));
  const RunResult usage = RunProcess(
      {kBin + "/lockstep_ctl", "reshard", first, MakeTempDir()}, {}, kDeadline);
  EXPECT_EQ(usage.exit_code, 2);
  EXPECT_THAT(usage.output, HasSubstr("--num_shards=S"));
}

}  // namespace
}  // namespace lockstep
