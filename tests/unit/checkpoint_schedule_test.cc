// CheckpointSchedule's triggers and retry delays on times the test picks.
#include "server/daemon/checkpoint_schedule.h"

#include "absl/time/time.h"
#include "gtest/gtest.h"

namespace lockstep {
namespace {

const absl::Time kStart = absl::FromUnixSeconds(1'000'000);

absl::Time At(int seconds) { return kStart + absl::Seconds(seconds); }

TEST(CheckpointScheduleTest, EveryNStepsCountsFromTheLastSave) {
  CheckpointSchedule schedule(3, absl::ZeroDuration(), kStart);
  EXPECT_EQ(schedule.last_saved_version(), -1);
  EXPECT_FALSE(schedule.Due(2, kStart));
  EXPECT_TRUE(schedule.Due(3, kStart)) << "from version 0 before any save";
  schedule.Saved(3, kStart);
  EXPECT_EQ(schedule.last_saved_version(), 3);
  EXPECT_FALSE(schedule.Due(3, At(3600))) << "saved already";
  EXPECT_FALSE(schedule.Due(5, kStart));
  EXPECT_TRUE(schedule.Due(6, kStart));
}

TEST(CheckpointScheduleTest, EveryIntervalCountsFromTheStartThenTheSave) {
  CheckpointSchedule schedule(0, absl::Seconds(10), kStart);
  EXPECT_FALSE(schedule.Due(1, At(9)));
  EXPECT_TRUE(schedule.Due(1, At(10)));
  schedule.Saved(1, At(10));
  EXPECT_FALSE(schedule.Due(2, At(19)));
  EXPECT_TRUE(schedule.Due(2, At(20)));
  EXPECT_FALSE(schedule.Due(1, At(20))) << "saved already";
}

TEST(CheckpointScheduleTest, WithNoTriggerNothingIsDue) {
  CheckpointSchedule schedule(0, absl::ZeroDuration(), kStart);
  EXPECT_FALSE(schedule.Due(1000, At(86400)));
}

TEST(CheckpointScheduleTest, EitherTriggerIsEnough) {
  CheckpointSchedule schedule(100, absl::Seconds(10), kStart);
  EXPECT_TRUE(schedule.Due(1, At(10)));
  EXPECT_TRUE(schedule.Due(100, At(1)));
  EXPECT_FALSE(schedule.Due(99, At(9)));
}

TEST(CheckpointScheduleTest, FailuresDelayTheNextTryDoublingToFiveMinutes) {
  CheckpointSchedule schedule(1, absl::ZeroDuration(), kStart);
  EXPECT_EQ(schedule.Failed(kStart), absl::Seconds(5));
  EXPECT_FALSE(schedule.Due(1, At(4)));
  EXPECT_TRUE(schedule.Due(1, At(5)));
  EXPECT_EQ(schedule.Failed(At(5)), absl::Seconds(10));
  EXPECT_FALSE(schedule.Due(1, At(14)));
  EXPECT_TRUE(schedule.Due(1, At(15)));
  EXPECT_EQ(schedule.Failed(At(15)), absl::Seconds(20));
  EXPECT_EQ(schedule.Failed(At(35)), absl::Seconds(40));
  EXPECT_EQ(schedule.Failed(At(75)), absl::Seconds(80));
  EXPECT_EQ(schedule.Failed(At(155)), absl::Seconds(160));
  EXPECT_EQ(schedule.Failed(At(315)), absl::Minutes(5));
  EXPECT_EQ(schedule.Failed(At(615)), absl::Minutes(5));
  EXPECT_FALSE(schedule.Due(1, At(914)));
  EXPECT_TRUE(schedule.Due(1, At(915)));
}

TEST(CheckpointScheduleTest, ASaveEndsTheRetryDelay) {
  CheckpointSchedule schedule(1, absl::ZeroDuration(), kStart);
  schedule.Failed(kStart);
  schedule.Failed(At(5));
  schedule.Saved(1, At(6));  // On request, say.
  EXPECT_TRUE(schedule.Due(2, At(6)));
  EXPECT_EQ(schedule.Failed(At(6)), absl::Seconds(5)) << "from the start";
}

TEST(CheckpointScheduleTest, ARestoredVersionIsSavedButTheIntervalRunsOn) {
  CheckpointSchedule schedule(0, absl::Seconds(10), kStart);
  schedule.Restored(7);
  EXPECT_EQ(schedule.last_saved_version(), 7);
  EXPECT_FALSE(schedule.Due(7, At(60)));
  EXPECT_TRUE(schedule.Due(8, At(10)));
  CheckpointSchedule by_steps(2, absl::ZeroDuration(), kStart);
  by_steps.Restored(7);
  EXPECT_FALSE(by_steps.Due(8, kStart));
  EXPECT_TRUE(by_steps.Due(9, kStart));
}

}  // namespace
}  // namespace lockstep
