// ActivityLog: last contacts, the latest step pushed and the time between
// the first pushes of consecutive steps.
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

}  // namespace
}  // namespace lockstep
