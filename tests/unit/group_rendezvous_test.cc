#include "server/coordination/group_rendezvous.h"

#include <optional>
#include <string>

#include "gtest/gtest.h"

namespace lockstep {
namespace {

using Group = GroupRendezvous::Group;
using Result = std::optional<absl::StatusOr<Group>>;

GroupRendezvous::Request Req(int rank, int64_t version, uint64_t member,
                             int size = 3, std::string group = "job") {
  GroupRendezvous::Request r;
  r.group = std::move(group);
  r.member = member;
  r.rank = rank;
  r.size = size;
  r.version = version;
  return r;
}

GroupRendezvous::Done Into(Result* result) {
  return [result](absl::StatusOr<Group> g) { *result = std::move(g); };
}

TEST(GroupRendezvousTest, FormsOnceEveryRankHasJoined) {
  GroupRendezvous groups;
  Result r0, r1, r2;
  EXPECT_NE(groups.Join(Req(2, 7, 12), Into(&r2)), 0);
  EXPECT_NE(groups.Join(Req(0, 5, 10), Into(&r0)), 0);
  EXPECT_FALSE(r0.has_value());
  EXPECT_FALSE(r2.has_value());
  EXPECT_EQ(groups.NumWaiting(), 2u);
  EXPECT_EQ(groups.Join(Req(1, 7, 11), Into(&r1)), 0);
  EXPECT_EQ(groups.NumWaiting(), 0u);
  for (int rank = 0; rank < 3; ++rank) {
    const Result& r = rank == 0 ? r0 : rank == 1 ? r1 : r2;
    ASSERT_TRUE(r.has_value()) << rank;
    ASSERT_TRUE(r->ok()) << r->status();
    EXPECT_EQ((*r)->generation, 1);
    EXPECT_EQ((*r)->rank, rank);
    EXPECT_EQ((*r)->size, 3);
    EXPECT_EQ((*r)->version, 7) << "the highest version";
    EXPECT_TRUE((*r)->state_needed) << "rank 0 is behind";
    EXPECT_EQ((*r)->source_rank, 1) << "the lowest rank at version 7";
  }
}

TEST(GroupRendezvousTest, EqualVersionsNeedNoStateAndGenerationsCount) {
  GroupRendezvous groups;
  for (int64_t generation = 1; generation <= 3; ++generation) {
    Result a, b;
    groups.Join(Req(0, 4, 1, 2), Into(&a));
    groups.Join(Req(1, 4, 2, 2), Into(&b));
    ASSERT_TRUE(a.has_value() && b.has_value());
    ASSERT_TRUE(a->ok() && b->ok());
    EXPECT_EQ((*a)->generation, generation);
    EXPECT_EQ((*b)->generation, generation);
    EXPECT_FALSE((*a)->state_needed);
    EXPECT_EQ((*a)->version, 4);
  }
  // Another group's generations count on their own.
  Result other;
  groups.Join(Req(0, 0, 3, 1, "other"), Into(&other));
  ASSERT_TRUE(other.has_value() && other->ok());
  EXPECT_EQ((*other)->generation, 1);
}

TEST(GroupRendezvousTest, ANewerMemberForARankReplacesTheWaitingOne) {
  GroupRendezvous groups;
  Result old_member, replacement, peer;
  groups.Join(Req(1, 3, 21, 2), Into(&old_member));
  groups.Join(Req(1, 0, 22, 2), Into(&replacement));
  ASSERT_TRUE(old_member.has_value());
  EXPECT_EQ(old_member->status().code(), absl::StatusCode::kAlreadyExists);
  EXPECT_NE(old_member->status().message().find("as rank 1"),
            std::string::npos);
  EXPECT_FALSE(replacement.has_value());
  groups.Join(Req(0, 9, 20, 2), Into(&peer));
  ASSERT_TRUE(replacement.has_value() && replacement->ok());
  EXPECT_EQ((*replacement)->version, 9);
  EXPECT_EQ((*replacement)->source_rank, 0);
  EXPECT_TRUE((*replacement)->state_needed);
}

TEST(GroupRendezvousTest, ACancelledMemberNoLongerCounts) {
  GroupRendezvous groups;
  Result gone, peer, back;
  const GroupRendezvous::WaiterId id =
      groups.Join(Req(0, 0, 1, 2), Into(&gone));
  EXPECT_TRUE(groups.Cancel(id));
  EXPECT_FALSE(groups.Cancel(id));
  groups.Join(Req(1, 0, 2, 2), Into(&peer));
  EXPECT_FALSE(peer.has_value()) << "rank 0 withdrew";
  groups.Join(Req(0, 0, 3, 2), Into(&back));
  EXPECT_FALSE(gone.has_value()) << "a cancelled callback never runs";
  ASSERT_TRUE(peer.has_value() && peer->ok());
  EXPECT_EQ((*peer)->generation, 1);
}

TEST(GroupRendezvousTest, RefusesBadRequests) {
  GroupRendezvous groups;
  Result waiting;
  groups.Join(Req(0, 0, 1, 3), Into(&waiting));
  struct Case {
    GroupRendezvous::Request request;
    absl::StatusCode code;
  };
  const Case cases[] = {
      {Req(1, 0, 2, 4), absl::StatusCode::kFailedPrecondition},
      {Req(3, 0, 2, 3), absl::StatusCode::kInvalidArgument},
      {Req(-1, 0, 2, 3), absl::StatusCode::kInvalidArgument},
      {Req(1, -1, 2, 3), absl::StatusCode::kInvalidArgument},
      {Req(1, 0, 0, 3), absl::StatusCode::kInvalidArgument},
      {Req(0, 0, 2, 0, "x"), absl::StatusCode::kInvalidArgument},
      {Req(0, 0, 2, 5000, "x"), absl::StatusCode::kInvalidArgument},
      {Req(0, 0, 2, 1, ""), absl::StatusCode::kInvalidArgument},
      {Req(0, 0, 2, 1, std::string(1025, 'g')),
       absl::StatusCode::kInvalidArgument},
  };
  for (const Case& c : cases) {
    Result r;
    EXPECT_EQ(groups.Join(c.request, Into(&r)), 0);
    ASSERT_TRUE(r.has_value());
    EXPECT_EQ(r->status().code(), c.code) << r->status();
  }
  EXPECT_FALSE(waiting.has_value()) << "refusals change nothing";
  EXPECT_EQ(groups.NumWaiting(), 1u);
}

TEST(GroupRendezvousTest, ShutdownFailsWaitersAndLaterJoins) {
  GroupRendezvous groups;
  Result waiting, later;
  groups.Join(Req(0, 0, 1, 2), Into(&waiting));
  groups.Shutdown();
  ASSERT_TRUE(waiting.has_value());
  EXPECT_EQ(waiting->status().code(), absl::StatusCode::kUnavailable);
  groups.Join(Req(0, 0, 1, 1), Into(&later));
  ASSERT_TRUE(later.has_value());
  EXPECT_EQ(later->status().code(), absl::StatusCode::kUnavailable);
  EXPECT_EQ(groups.NumWaiting(), 0u);
}

}  // namespace
}  // namespace lockstep
