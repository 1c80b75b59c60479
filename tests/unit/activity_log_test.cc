// ActivityLog: last contacts, the latest step pushed, the time between
// the first pushes of consecutive steps, and the window of lateness and
// worker reports the straggler verdict reads.
#include "server/core/activity_log.h"

#include <vector>

#include "absl/time/time.h"
#include "gtest/gtest.h"

namespace lockstep {
namespace {

const absl::Time kT0 = absl::FromUnixSeconds(1000);

TEST(ActivityLogTest, StartsEmptyInRankOrder) {
  ActivityLog log(2);
  std::vector<WorkerActivity> a = log.Get();
  ASSERT_EQ(a.size(), 2u);
  EXPECT_EQ(a[0].rank, 0);
  EXPECT_EQ(a[1].rank, 1);
  EXPECT_EQ(a[1].last_contact, absl::InfinitePast());
  EXPECT_EQ(a[1].last_step, -1);
  EXPECT_EQ(a[1].last_step_time, absl::ZeroDuration());
}

TEST(ActivityLogTest, StepTimeSpansFirstPushesOfConsecutiveSteps) {
  ActivityLog log(2);
  log.Note(1, kT0);  // Not a push: a contact only.
  EXPECT_EQ(log.Get()[1].last_contact, kT0);
  EXPECT_EQ(log.Get()[1].last_step, -1);
  log.Note(1, kT0 + absl::Seconds(1), /*pushed_step=*/0);
  log.Note(1, kT0 + absl::Seconds(2), 0);  // Another chunk of step 0.
  log.Note(1, kT0 + absl::Seconds(4), 1);
  WorkerActivity a = log.Get()[1];
  EXPECT_EQ(a.last_step, 1);
  EXPECT_EQ(a.last_step_time, absl::Seconds(3)) << "from 1 s to 4 s";
  EXPECT_EQ(a.last_contact, kT0 + absl::Seconds(4));
  log.Note(1, kT0 + absl::Seconds(10), 3);  // Skipped step 2: no time.
  a = log.Get()[1];
  EXPECT_EQ(a.last_step, 3);
  EXPECT_EQ(a.last_step_time, absl::Seconds(3));
  EXPECT_EQ(log.Get()[0].last_step, -1) << "rank 0 untouched";
}

TEST(ActivityLogTest, ContactsNeverGoBackAndBadRanksAreIgnored) {
  ActivityLog log(1);
  log.Note(0, kT0 + absl::Seconds(5));
  log.Note(0, kT0);  // An older call answered late.
  EXPECT_EQ(log.Get()[0].last_contact, kT0 + absl::Seconds(5));
  log.Note(-1, kT0);
  log.Note(1, kT0);
  EXPECT_EQ(log.Get().size(), 1u);
}

// Two ranks in lockstep; rank 1's last push of each step comes 30 ms after
// the step's first push (rank 0's, at 0 ms), rank 0's last at 5 ms. Steps
// are 100 ms apart.
TEST(ActivityLogTest, WindowHoldsMediansOfLatenessStepTimeAndReports) {
  ActivityLog log(2);
  for (int64_t step = 0; step < 20; ++step) {
    const absl::Time open = kT0 + step * absl::Milliseconds(100);
    StepReport r0{step - 1, 1000, 8000, 100, 20000};
    StepReport r1{step - 1, 1000, 38000, 100, 2000};
    log.Note(0, open, step, r0);
    log.Note(1, open + absl::Milliseconds(2), step, r1);
    log.Note(0, open + absl::Milliseconds(5), step, r0);
    log.Note(1, open + absl::Milliseconds(30), step, r1);
  }
  const std::vector<WorkerActivity> a = log.Get();
  // Steps 0..18 are over (step 19's pushes are still arriving); the window
  // keeps the last 16.
  EXPECT_EQ(a[0].window.late_steps, ActivityLog::kWindow);
  EXPECT_EQ(a[0].window.lateness, absl::Milliseconds(5));
  EXPECT_EQ(a[1].window.lateness, absl::Milliseconds(30));
  EXPECT_EQ(a[1].window.timed_steps, ActivityLog::kWindow);
  EXPECT_EQ(a[1].window.step_time, absl::Milliseconds(100));
  // Reports of steps 0..18 (step -1's is none); one per step, not per push.
  EXPECT_EQ(a[1].window.reports, ActivityLog::kWindow);
  EXPECT_EQ(a[1].window.compute, absl::Milliseconds(38));
  EXPECT_EQ(a[1].window.input, absl::Milliseconds(1));
  EXPECT_EQ(a[1].window.push, absl::Microseconds(100));
  EXPECT_EQ(a[1].window.wait, absl::Milliseconds(2));
  EXPECT_EQ(a[0].window.wait, absl::Milliseconds(20));
}

TEST(ActivityLogTest, ImplausibleReportsAndResentPushesAreNotSampled) {
  ActivityLog log(1);
  log.Note(0, kT0, 0);
  log.Note(0, kT0 + absl::Milliseconds(10), 1,
           StepReport{0, -5, 1000, 0, 0});  // A negative phase.
  log.Note(0, kT0 + absl::Milliseconds(20), 2,
           StepReport{1, 0, int64_t{1} << 50, 0, 0});  // Centuries.
  log.Note(0, kT0 + absl::Milliseconds(30), 1);  // A re-sent push.
  const WorkerActivity a = log.Get()[0];
  EXPECT_EQ(a.window.reports, 0);
  EXPECT_EQ(a.last_step, 2);
  EXPECT_EQ(a.window.timed_steps, 2);
  EXPECT_EQ(a.window.step_time, absl::Milliseconds(10));
}

}  // namespace
}  // namespace lockstep
