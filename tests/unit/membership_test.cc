// Membership alone: incarnations issued, checked, replaced, revoked and
// evicted, with the code each refusal gives a worker, and leaving.
#include "server/core/membership.h"

#include <vector>

#include "absl/status/status.h"
#include "absl/time/time.h"
#include "gmock/gmock.h"
#include "gtest/gtest.h"

namespace lockstep {
namespace {

using ::testing::ElementsAre;
using ::testing::HasSubstr;
using ::testing::IsEmpty;

constexpr int64_t kServer = 1234;

TEST(MembershipTest, ChecksRankAndIncarnation) {
  Membership m(/*num_workers=*/2, kServer);
  EXPECT_EQ(m.num_workers(), 2);
  EXPECT_EQ(m.server_incarnation(), kServer);
  absl::Status unknown = m.Check(2, 1);
  EXPECT_EQ(unknown.code(), absl::StatusCode::kFailedPrecondition);
  EXPECT_EQ(unknown.message(), "unknown rank 2 (job has 2 workers)");
  EXPECT_EQ(m.Check(-1, 1).code(), absl::StatusCode::kFailedPrecondition);
  absl::Status not_registered = m.Check(1, 7);
  EXPECT_EQ(not_registered.code(), absl::StatusCode::kNotFound);
  EXPECT_EQ(not_registered.message(),
            "rank 1 is not registered with this server (server 1234); it "
            "may have restarted");

  absl::StatusOr<int64_t> inc = m.Admit(1);
  ASSERT_TRUE(inc.ok()) << inc.status();
  EXPECT_GT(*inc, 0);
  EXPECT_TRUE(m.Check(1, *inc).ok());
  absl::Status forged = m.Check(1, *inc + 1);
  EXPECT_EQ(forged.code(), absl::StatusCode::kPermissionDenied);
  EXPECT_THAT(forged.message(), HasSubstr("was not issued by this server"));
  EXPECT_EQ(m.Check(0, *inc).code(), absl::StatusCode::kNotFound)
      << "another rank's incarnation, and rank 0 has none";
}

TEST(MembershipTest, IncarnationsAreDistinctAndAReplacedOneIsTold) {
  Membership m(3, kServer);
  absl::StatusOr<int64_t> a = m.Admit(0), b = m.Admit(1), c = m.Admit(2);
  ASSERT_TRUE(a.ok() && b.ok() && c.ok());
  EXPECT_NE(*a, *b);
  EXPECT_NE(*b, *c);
  EXPECT_NE(*a, *c);
  absl::StatusOr<int64_t> again = m.Admit(1);
  ASSERT_TRUE(again.ok());
  EXPECT_NE(*again, *b);
  absl::Status replaced = m.Check(1, *b);
  EXPECT_EQ(replaced.code(), absl::StatusCode::kAlreadyExists);
  EXPECT_EQ(replaced.message(),
            absl::StrCat("rank 1 incarnation ", *b,
                         " was replaced: another worker registered as rank 1"));
  EXPECT_TRUE(m.Check(1, *again).ok());
}

TEST(MembershipTest, RevokesAllButRankZeroWithTheReason) {
  Membership m(3, kServer);
  absl::StatusOr<int64_t> r0 = m.Admit(0), r2 = m.Admit(2);
  ASSERT_TRUE(r0.ok() && r2.ok());
  m.RevokeAllButRankZero("model signature differs from rank 0's: x");
  EXPECT_TRUE(m.Check(0, *r0).ok());
  absl::Status revoked = m.Check(2, *r2);
  EXPECT_EQ(revoked.code(), absl::StatusCode::kFailedPrecondition);
  EXPECT_EQ(revoked.message(), "model signature differs from rank 0's: x");
  std::vector<int> registered, left;
  m.Roster(&registered, &left);
  EXPECT_THAT(registered, ElementsAre(0));
  EXPECT_THAT(left, IsEmpty());
}

TEST(MembershipTest, EvictsRegisteredRanksOnly) {
  Membership m(3, kServer);
  absl::StatusOr<int64_t> r0 = m.Admit(0), r1 = m.Admit(1);
  ASSERT_TRUE(r0.ok() && r1.ok());
  m.Evict({1, 2}, /*step=*/7);  // Rank 2 never registered: nothing to do.
  absl::Status evicted = m.Check(1, *r1);
  EXPECT_EQ(evicted.code(), absl::StatusCode::kAborted);
  EXPECT_EQ(evicted.message(),
            "rank 1 was evicted: it did not push step 7 within the step "
            "timeout; register again");
  EXPECT_TRUE(m.Check(0, *r0).ok());
  std::vector<int> registered, left;
  m.Roster(&registered, &left);
  EXPECT_THAT(registered, ElementsAre(0));
}

TEST(MembershipTest, LeavingMembersAndAnonymousRanks) {
  Membership m(3, kServer);
  absl::StatusOr<int64_t> r0 = m.Admit(0), r1 = m.Admit(1);
  ASSERT_TRUE(r0.ok() && r1.ok());
  EXPECT_FALSE(m.WaitUntilAllLeft(absl::ZeroDuration()));

  absl::StatusOr<bool> forged = m.Leave(0, *r1);
  EXPECT_EQ(forged.status().code(), absl::StatusCode::kPermissionDenied);
  absl::StatusOr<bool> anonymous_member = m.Leave(1, 0);
  EXPECT_EQ(anonymous_member.status().code(),
            absl::StatusCode::kPermissionDenied)
      << "incarnation 0 does not let a registered rank leave";

  absl::StatusOr<bool> member = m.Leave(0, *r0);
  ASSERT_TRUE(member.ok());
  EXPECT_TRUE(*member);
  absl::StatusOr<bool> never_registered = m.Leave(2, 0);
  ASSERT_TRUE(never_registered.ok());
  EXPECT_FALSE(*never_registered);
  absl::StatusOr<bool> left_already = m.Leave(0, 0);
  ASSERT_TRUE(left_already.ok());
  EXPECT_FALSE(*left_already);

  std::vector<int> registered, left;
  m.Roster(&registered, &left);
  EXPECT_THAT(registered, ElementsAre(0, 1));
  EXPECT_THAT(left, ElementsAre(0, 2));
  EXPECT_FALSE(m.WaitUntilAllLeft(absl::ZeroDuration()));
  ASSERT_TRUE(m.Leave(1, *r1).ok());
  EXPECT_TRUE(m.WaitUntilAllLeft(absl::ZeroDuration()));

  absl::StatusOr<int64_t> back = m.Admit(1);
  ASSERT_TRUE(back.ok());
  EXPECT_FALSE(m.WaitUntilAllLeft(absl::ZeroDuration()))
      << "registering again is joining again";
}

// All-reduce ranks never register: one that left after a stop signal or a
// failure and is formed into a group again is back in the job; one that
// finished, or that the finishing group left for, stays left, so a late
// process cannot keep a finished job from ending.
TEST(MembershipTest, OnlyAStoppedOrFailedUnregisteredRankComesBack) {
  Membership m(4, kServer);
  ASSERT_TRUE(m.Leave(0, 0, {LeaveReason::kStopped, ""}).ok());
  ASSERT_TRUE(m.Leave(1, 0, {LeaveReason::kFailed, "boom"}).ok());
  ASSERT_TRUE(m.Leave(2, 0, {LeaveReason::kFinished, ""}).ok());
  ASSERT_TRUE(m.Leave(3, 0).ok());  // Left for by the finishing group.
  EXPECT_TRUE(m.WaitUntilAllLeft(absl::ZeroDuration()));
  EXPECT_TRUE(m.Returned(0));
  EXPECT_TRUE(m.Returned(1));
  EXPECT_FALSE(m.Returned(2));
  EXPECT_FALSE(m.Returned(3));
  EXPECT_FALSE(m.Returned(0)) << "back already";
  EXPECT_FALSE(m.Returned(7)) << "out of range";
  std::vector<int> registered, left;
  m.Roster(&registered, &left);
  EXPECT_THAT(left, ElementsAre(2, 3));
  EXPECT_TRUE(m.Ends(LeaveReason::kFailed).empty()) << "rank 1 is back";
  EXPECT_FALSE(m.WaitUntilAllLeft(absl::ZeroDuration()));
}

}  // namespace
}  // namespace lockstep
