// The straggler verdict (common/ops/straggler_verdict.h) on hand-made
// windows, and the worker's clock that fills the reports
// (worker/exchange/step_report_clock.h) on hand-set times.
#include "common/ops/straggler_verdict.h"

#include <vector>

#include "absl/time/time.h"
#include "gtest/gtest.h"
#include "worker/exchange/step_report_clock.h"

namespace lockstep {
namespace {

absl::Duration Ms(double ms) { return absl::Microseconds(ms * 1000); }

// A rank of a synchronous job: late `late` ms to the barrier, its own
// phases as given (ms), steps of 100 ms.
RankTiming Rank(int rank, double late, double input, double compute,
                double push, double wait) {
  RankTiming t;
  t.rank = rank;
  t.late_steps = t.timed_steps = t.reports = 16;
  t.lateness = Ms(late);
  t.step_time = Ms(100);
  t.input = Ms(input);
  t.compute = Ms(compute);
  t.push = Ms(push);
  t.wait = Ms(wait);
  return t;
}

TEST(StragglerVerdictTest, NamesTheSlowRankAndItsPhase) {
  const StragglerOptions options;
  // Rank 2 computes 40 ms longer than ranks 0, 1, 3.
  std::vector<RankTiming> ranks = {
      Rank(0, 5, 1, 20, 1, 70), Rank(1, 6, 1, 21, 1, 69),
      Rank(2, 45, 1, 60, 1, 30), Rank(3, 5, 1, 20, 1, 70)};
  std::vector<Straggler> found = FindStragglers(ranks, options);
  ASSERT_EQ(found.size(), 1u);
  EXPECT_EQ(found[0].rank, 2);
  EXPECT_TRUE(found[0].by_lateness);
  EXPECT_EQ(found[0].others, Ms(5));
  EXPECT_DOUBLE_EQ(found[0].excess, 0.4);
  EXPECT_EQ(found[0].phase, SlowPhase::kCompute);
  EXPECT_EQ(found[0].phase_excess, Ms(40));
  EXPECT_EQ(DescribeStraggler(found[0]),
            "rank 2 is 40.0 ms later to the barrier than the others' median "
            "(+40% of a 100.0 ms step): compute, 40.0 ms more than theirs");

  // The same lateness from a slow batch loading.
  ranks[2] = Rank(2, 45, 41, 20, 1, 30);
  found = FindStragglers(ranks, options);
  ASSERT_EQ(found.size(), 1u);
  EXPECT_EQ(found[0].phase, SlowPhase::kInput);
  EXPECT_EQ(found[0].phase_excess, Ms(40));

  // Late to the barrier with nothing slow of its own: its link.
  ranks[2] = Rank(2, 45, 1, 20, 1, 70);
  found = FindStragglers(ranks, options);
  ASSERT_EQ(found.size(), 1u);
  EXPECT_EQ(found[0].phase, SlowPhase::kNetwork);
  EXPECT_EQ(found[0].phase_excess, Ms(40));
  EXPECT_EQ(DescribeStraggler(found[0]),
            "rank 2 is 40.0 ms later to the barrier than the others' median "
            "(+40% of a 100.0 ms step): network, 40.0 ms of lateness its own "
            "phases do not explain");
}

TEST(StragglerVerdictTest, TwoRanksCompareWithEachOtherAndTheThresholdHolds) {
  StragglerOptions options;
  std::vector<RankTiming> ranks = {Rank(0, 5, 0, 20, 1, 70),
                                   Rank(1, 24, 0, 39, 1, 50)};
  // 19 ms over the other: under 20% of the 100 ms step.
  EXPECT_TRUE(FindStragglers(ranks, options).empty());
  ranks[1] = Rank(1, 26, 0, 41, 1, 50);  // 21 ms: over.
  std::vector<Straggler> found = FindStragglers(ranks, options);
  ASSERT_EQ(found.size(), 1u);
  EXPECT_EQ(found[0].rank, 1);
  options.fraction = 0.25;
  EXPECT_TRUE(FindStragglers(ranks, options).empty());
}

TEST(StragglerVerdictTest, TooFewSamplesOrRanksGiveNoVerdict) {
  const StragglerOptions options;
  std::vector<RankTiming> ranks = {Rank(0, 5, 0, 20, 1, 70),
                                   Rank(1, 60, 0, 75, 1, 10)};
  ranks[1].late_steps = ranks[1].timed_steps = options.min_steps - 1;
  EXPECT_TRUE(FindStragglers(ranks, options).empty()) << "one judged rank";
  EXPECT_TRUE(FindStragglers({}, options).empty());
}

TEST(StragglerVerdictTest, AsyncModesCompareStepTimeAndWorkersWithoutReports) {
  StragglerOptions options;
  options.synchronous = false;
  std::vector<RankTiming> ranks = {Rank(0, 0, 1, 20, 1, 10),
                                   Rank(1, 0, 1, 20, 1, 10),
                                   Rank(2, 0, 1, 20, 1, 40)};
  ranks[2].step_time = Ms(130);  // Its answers come 30 ms later.
  std::vector<Straggler> found = FindStragglers(ranks, options);
  ASSERT_EQ(found.size(), 1u);
  EXPECT_EQ(found[0].rank, 2);
  EXPECT_FALSE(found[0].by_lateness);
  EXPECT_EQ(found[0].phase, SlowPhase::kNetwork);
  EXPECT_EQ(found[0].phase_excess, Ms(30));

  // Older workers send no reports: the rank is named, its phase is not.
  for (RankTiming& r : ranks) r.reports = 0;
  found = FindStragglers(ranks, options);
  ASSERT_EQ(found.size(), 1u);
  EXPECT_EQ(found[0].phase, SlowPhase::kUnknown);
  EXPECT_NE(DescribeStraggler(found[0]).find("reports no phases"),
            std::string::npos);
}

// SSP: the staleness bound holds ranks 0 and 2 to rank 1's pace, so every
// step takes 160 ms; rank 1 computes 60 ms longer and the others wait that
// much longer for their answers. Before, step times alone named no one.
TEST(StragglerVerdictTest, SspNamesTheRankTheOthersAreHeldBackFor) {
  StragglerOptions options;
  options.synchronous = false;
  std::vector<RankTiming> ranks = {Rank(0, 0, 1, 90, 1, 68),
                                   Rank(1, 0, 1, 150, 1, 8),
                                   Rank(2, 0, 1, 90, 1, 68)};
  for (RankTiming& r : ranks) r.step_time = Ms(160);
  std::vector<Straggler> found = FindStragglers(ranks, options);
  ASSERT_EQ(found.size(), 1u);
  EXPECT_EQ(found[0].rank, 1);
  EXPECT_TRUE(found[0].by_work);
  EXPECT_EQ(found[0].slowness - found[0].others, Ms(60));
  EXPECT_EQ(found[0].phase, SlowPhase::kCompute);
  EXPECT_EQ(found[0].phase_excess, Ms(60));
  EXPECT_EQ(DescribeStraggler(found[0]),
            "rank 1 is 60.0 ms slower a step of its own work (its step "
            "less its wait) than the others' median (+38% of a 160.0 ms "
            "step): compute, 60.0 ms more than theirs");
}

TEST(StragglerVerdictTest, ShardsMergeToTheLatestPushAndLongestStep) {
  RankTiming a = Rank(1, 10, 1, 20, 1, 70);
  RankTiming b = Rank(1, 30, 2, 22, 2, 72);
  b.reports = 3;  // Fewer reports: a's are kept.
  b.step_time = Ms(110);
  MergeRankTiming(b, &a);
  EXPECT_EQ(a.lateness, Ms(30));
  EXPECT_EQ(a.step_time, Ms(110));
  EXPECT_EQ(a.compute, Ms(20));
  RankTiming empty;
  MergeRankTiming(a, &empty);
  EXPECT_EQ(empty.lateness, Ms(30));
  EXPECT_EQ(empty.reports, 16);
}

TEST(StepReportClockTest, SplitsAStepIntoItsPhases) {
  const absl::Time t0 = absl::FromUnixSeconds(100);
  StepReportClock clock;
  clock.Restart(t0);
  clock.InputReady(t0 + Ms(3));
  clock.Pushed(Ms(2));
  clock.Pushed(Ms(1));
  clock.Finishing(t0 + Ms(23));
  StepReport r = clock.Finished(7, t0 + Ms(30));
  EXPECT_EQ(r.step, 7);
  EXPECT_EQ(r.input_us, 3000);
  EXPECT_EQ(r.compute_us, 17000) << "3 to 23 ms, less 3 ms of pushing";
  EXPECT_EQ(r.push_us, 3000);
  EXPECT_EQ(r.wait_us, 7000);
  // The next step starts where this one ended; without InputReady (the
  // Python package) its input is counted as compute.
  clock.Finishing(t0 + Ms(50));
  r = clock.Finished(8, t0 + Ms(55));
  EXPECT_EQ(r.input_us, 0);
  EXPECT_EQ(r.compute_us, 20000);
  EXPECT_EQ(r.push_us, 0);
  EXPECT_EQ(r.wait_us, 5000);
  // The client encoded for 4 ms in all (the push thread, or FinishStep),
  // 1 ms of it in the hand-off: the other 3 ms are push, not wait.
  clock.Pushed(Ms(1));
  clock.Finishing(t0 + Ms(70));
  r = clock.Finished(9, t0 + Ms(80), Ms(4));
  EXPECT_EQ(r.compute_us, 14000);
  EXPECT_EQ(r.push_us, 4000);
  EXPECT_EQ(r.wait_us, 7000);
}

TEST(StragglerVerdictTest, ABackupRankWithoutStepTimesLeavesTheMedianStep) {
  std::vector<RankTiming> ranks = {Rank(0, 5, 0, 20, 1, 70),
                                   Rank(1, 5, 0, 20, 1, 70),
                                   Rank(2, 30, 0, 45, 1, 50)};
  ranks[1].timed_steps = 0;  // Skips every step: no step time.
  ranks[1].step_time = absl::ZeroDuration();
  const std::vector<Straggler> found = FindStragglers(ranks, {});
  ASSERT_EQ(found.size(), 1u);
  EXPECT_EQ(found[0].step_time, Ms(100));
  EXPECT_DOUBLE_EQ(found[0].excess, 0.25);
}

}  // namespace
}  // namespace lockstep
