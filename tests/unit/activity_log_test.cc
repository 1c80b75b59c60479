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

// The shards stepped back to a checkpoint (or an async worker started
// over): the windows start again, and lateness is measured against the
// new run's first pushes, not the old run's.
TEST(ActivityLogTest, StepsGoingBackStartTheWindowAgain) {
  ActivityLog log(2);
  for (int64_t step = 0; step < 10; ++step) {
    const absl::Time open = kT0 + step * absl::Milliseconds(100);
    log.Note(0, open, step, StepReport{step - 1, 0, 9000, 0, 0});
    log.Note(1, open + absl::Milliseconds(40), step);
  }
  ASSERT_EQ(log.Get()[1].window.late_steps, 9);
  const absl::Time back = kT0 + absl::Seconds(5);
  // Rank 1 goes back to step 4 first, rank 0 after it.
  for (int64_t step = 4; step < 12; ++step) {
    const absl::Time open = back + (step - 4) * absl::Milliseconds(100);
    log.Note(1, open, step);
    log.Note(0, open + absl::Milliseconds(10), step,
             StepReport{step - 1, 0, 7000, 0, 0});
  }
  const std::vector<WorkerActivity> a = log.Get();
  EXPECT_EQ(a[1].window.late_steps, 7) << "steps 4 to 10 of the new run";
  EXPECT_EQ(a[1].window.lateness, absl::ZeroDuration());
  EXPECT_EQ(a[0].window.lateness, absl::Milliseconds(10));
  EXPECT_EQ(a[0].window.reports, 8) << "steps 3 to 10 again";
  EXPECT_EQ(a[0].window.compute, absl::Milliseconds(7));
  EXPECT_EQ(a[1].last_step, 11);
}

TEST(ActivityLogTest, ARankThatStoppedPushingIsNotCounted) {
  ActivityLog log(2);
  for (int64_t step = 0; step < 10; ++step) {
    const absl::Time open = kT0 + step * absl::Milliseconds(100);
    log.Note(0, open, step);
    if (step < 6) log.Note(1, open, step);
  }
  const absl::Time now = kT0 + absl::Milliseconds(2800);
  const std::vector<WorkerActivity> a = log.Get(now);
  EXPECT_EQ(a[0].window.timed_steps, 9) << "last pushed 1.9 s ago";
  EXPECT_EQ(a[1].window.timed_steps, 0) << "last pushed 2.3 s ago";
  EXPECT_EQ(a[1].window.late_steps, 0);
  EXPECT_EQ(log.Get()[1].window.timed_steps, 5) << "no clock, no ageing";
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

// An all-reduce rank's reports (Coordinator.ReportSteps) are its window:
// each new step's phases are a report, and their sum a step time. A step
// reported again (a regroup redid it) counts once; implausible ones not
// at all; steps that go back start the window again; a rank silent for
// longer than 2 s is not judged. No lateness: no pushes arrive.
TEST(ActivityLogTest, AllReduceReportsFillTheWindow) {
  ActivityLog log(2);
  std::vector<StepReport> reports;
  for (int64_t step = 0; step < 5; ++step) {
    // Step 2's compute is the odd one: the medians are of the others.
    reports.push_back({step, 100, step == 2 ? 9000 : 3000, 0, 1000});
  }
  log.NoteReports(1, kT0, reports);
  log.NoteReports(1, kT0 + absl::Seconds(1),
                  std::vector<StepReport>{{4, 1, 1, 1, 1},  // Again: dropped.
                                          {5, -1, 0, 0, 0},  // Implausible.
                                          {6, 100, 3000, 0, 1000}});
  ActivityWindow w = log.Get(kT0 + absl::Seconds(2))[1].window;
  EXPECT_EQ(w.reports, 6);
  EXPECT_EQ(w.timed_steps, 6);
  EXPECT_EQ(w.step_time, absl::Microseconds(4100));
  EXPECT_EQ(w.input, absl::Microseconds(100));
  EXPECT_EQ(w.compute, absl::Microseconds(3000));
  EXPECT_EQ(w.push, absl::ZeroDuration());
  EXPECT_EQ(w.wait, absl::Microseconds(1000));
  EXPECT_EQ(w.late_steps, 0);
  EXPECT_EQ(log.Get()[1].last_contact, kT0 + absl::Seconds(1));
  // Its latest step, and that step's time (status, the step gauge).
  EXPECT_EQ(log.Get()[1].last_step, 6);
  EXPECT_EQ(log.Get()[1].last_step_time, absl::Microseconds(4100));
  EXPECT_EQ(log.Get()[0].window.reports, 0) << "rank 0 untouched";
  // Silent for 3 s (over 2 s and 4 steps): not judged.
  EXPECT_EQ(log.Get(kT0 + absl::Seconds(4)).at(1).window.reports, 0);
  // From a checkpoint: steps 2 and 3 again, of another run.
  log.NoteReports(1, kT0 + absl::Seconds(5),
                  std::vector<StepReport>{{2, 0, 50, 0, 50}, {3, 0, 50, 0, 50}});
  w = log.Get(kT0 + absl::Seconds(5))[1].window;
  EXPECT_EQ(w.reports, 2);
  EXPECT_EQ(w.step_time, absl::Microseconds(100));
  log.NoteReports(7, kT0, reports);  // Out of range: ignored.
  EXPECT_EQ(log.Get().size(), 2u);
}

}  // namespace
}  // namespace lockstep
