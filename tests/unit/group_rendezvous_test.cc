#include "server/coordination/group_rendezvous.h"

#include <atomic>
#include <optional>
#include <string>
#include <vector>

#include "absl/synchronization/notification.h"
#include "absl/time/clock.h"
#include "common/model/model_signature.h"
#include "common/model/signature_proto.h"
#include "gtest/gtest.h"

namespace lockstep {
namespace {

using Group = GroupRendezvous::Group;
using Result = std::optional<absl::StatusOr<Group>>;

GroupRendezvous::Request Req(int rank, int64_t version, uint64_t member,
                             int size = 3, std::string group = "job",
                             int min_size = 0,
                             absl::Duration settle = absl::ZeroDuration()) {
  GroupRendezvous::Request r;
  r.min_size = min_size;
  r.settle = settle;
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
    EXPECT_EQ((*r)->index, rank) << "every rank is there";
    EXPECT_EQ((*r)->members, (std::vector<int>{0, 1, 2}));
    EXPECT_EQ((*r)->version, 7) << "the highest version";
    EXPECT_TRUE((*r)->state_needed) << "rank 0 is behind";
    EXPECT_EQ((*r)->source_index, 1) << "the lowest rank at version 7";
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
  EXPECT_EQ((*replacement)->source_index, 0);
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
      // A "/" would let a group's generation keys ("job/g1/...") be
      // another group's ("job" at generation 1), which the coordinator
      // then forgets when "job" forms generation 2.
      {Req(0, 0, 2, 1, "job/g1"), absl::StatusCode::kInvalidArgument},
      {Req(1, 0, 2, 3, "job", 2), absl::StatusCode::kFailedPrecondition},
      {Req(0, 0, 2, 2, "y", 3), absl::StatusCode::kInvalidArgument},
      {Req(0, 0, 2, 2, "y", 1, absl::Minutes(11)),
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

// An elastic group (2 to 4 ranks) forms with those there once the settle
// time has passed since the last one joined; its members' indices are
// their places among the ranks present.
TEST(GroupRendezvousTest, AnElasticGroupFormsWithFewerAfterTheSettleTime) {
  GroupRendezvous groups;
  const absl::Duration settle = absl::Milliseconds(200);
  // Both answers come from the rendezvous' timer thread, one after the
  // other: wait for the two.
  std::atomic<int> left{2};
  absl::Notification both;
  Result r1, r3;
  auto into = [&](Result* result) {
    return [&left, &both, result](absl::StatusOr<Group> g) {
      *result = std::move(g);
      if (--left == 0) both.Notify();
    };
  };
  groups.Join(Req(3, 5, 1, 4, "job", 2, settle), into(&r3));
  const absl::Time start = absl::Now();
  groups.Join(Req(1, 5, 2, 4, "job", 2, settle), into(&r1));
  ASSERT_TRUE(both.WaitForNotificationWithTimeout(absl::Seconds(30)));
  EXPECT_GE(absl::Now() - start, settle);
  ASSERT_TRUE(r1.has_value() && r1->ok()) << r1->status();
  ASSERT_TRUE(r3.has_value() && r3->ok());
  EXPECT_EQ((*r1)->members, (std::vector<int>{1, 3}));
  EXPECT_EQ((*r1)->index, 0);
  EXPECT_EQ((*r3)->index, 1);
  EXPECT_EQ((*r1)->generation, 1);
  EXPECT_FALSE((*r1)->state_needed);
}

// A group's size and minimum are those of its first member, for good: a
// joiner that differs is refused even when no round is forming.
TEST(GroupRendezvousTest, AJoinerWithAnotherLayoutIsRefused) {
  GroupRendezvous groups;
  Result a, b;
  groups.Join(Req(0, 0, 1, 2), Into(&a));
  groups.Join(Req(1, 0, 2, 2), Into(&b));
  ASSERT_TRUE(a.has_value() && a->ok());
  Result other;
  groups.Join(Req(1, 0, 3, 2, "job", 1), Into(&other));
  ASSERT_TRUE(other.has_value());
  EXPECT_EQ(other->status().code(), absl::StatusCode::kFailedPrecondition);
  EXPECT_NE(other->status().message().find("--min_workers"), std::string::npos);
  EXPECT_EQ(groups.NumWaiting(), 0u);
}

// A serialized signature of a one-tensor model of `shape`.
std::string Signature(std::vector<int64_t> shape) {
  ModelSignature signature;
  signature.tensors.push_back({"dense/kernel", std::move(shape)});
  v1::ModelSignature proto;
  SignatureToProto(signature, &proto);
  return proto.SerializeAsString();
}

// A member whose model differs from the group's is refused, naming the
// difference; the same model is welcome.
TEST(GroupRendezvousTest, AMemberWithAnotherModelIsRefused) {
  GroupRendezvous groups;
  GroupRendezvous::Request first = Req(0, 0, 1, 2);
  first.signature = Signature({4, 3});
  Result a, b, c;
  groups.Join(first, Into(&a));
  GroupRendezvous::Request other = Req(1, 0, 2, 2);
  other.signature = Signature({4, 5});
  groups.Join(other, Into(&b));
  ASSERT_TRUE(b.has_value());
  EXPECT_EQ(b->status().code(), absl::StatusCode::kFailedPrecondition);
  EXPECT_NE(b->status().message().find("dense/kernel"), std::string::npos)
      << b->status();
  GroupRendezvous::Request same = Req(1, 0, 3, 2);
  same.signature = Signature({4, 3});
  groups.Join(same, Into(&c));
  ASSERT_TRUE(c.has_value() && c->ok());
  ASSERT_TRUE(a.has_value() && a->ok());
}

// One member of a 2-to-3 group is not enough, however long it waits.
TEST(GroupRendezvousTest, AnElasticGroupWaitsForItsMinimum) {
  GroupRendezvous groups;
  Result r0;
  groups.Join(Req(0, 0, 1, 3, "job", 2, absl::Milliseconds(1)), Into(&r0));
  absl::SleepFor(absl::Milliseconds(100));
  EXPECT_FALSE(r0.has_value());
  EXPECT_EQ(groups.NumWaiting(), 1u);
}

// A watch of generation 1 answers once a member waits for the next
// generation, and at once for a generation the group has formed past.
TEST(GroupRendezvousTest, WatchSeesAJoinerAndANewerGeneration) {
  GroupRendezvous groups;
  Result a, b;
  absl::Notification formed;
  groups.Join(Req(0, 0, 1, 3, "job", 2), Into(&a));
  groups.Join(Req(1, 0, 2, 3, "job", 2), [&](absl::StatusOr<Group> g) {
    b = std::move(g);
    formed.Notify();
  });
  // Settle 0: the timer forms it as soon as it runs.
  ASSERT_TRUE(formed.WaitForNotificationWithTimeout(absl::Seconds(30)));
  ASSERT_TRUE(a.has_value() && a->ok());
  EXPECT_EQ((*a)->members, (std::vector<int>{0, 1}));
  std::optional<absl::StatusOr<int>> seen;
  auto into = [&](absl::StatusOr<int> n) { seen = std::move(n); };
  EXPECT_NE(groups.Watch("job", 1, into), 0);
  EXPECT_FALSE(seen.has_value());
  Result joiner;
  groups.Join(Req(2, 0, 3, 3, "job", 2, absl::Seconds(60)), Into(&joiner));
  ASSERT_TRUE(seen.has_value());
  ASSERT_TRUE(seen->ok());
  EXPECT_EQ(**seen, 1);
  seen.reset();
  EXPECT_EQ(groups.Watch("job", 0, into), 0);
  ASSERT_TRUE(seen.has_value() && seen->ok());
  EXPECT_EQ(**seen, 0) << "generation 1 formed past 0";
  seen.reset();
  EXPECT_EQ(groups.Watch("nobody", 0, into), 0);
  ASSERT_TRUE(seen.has_value());
  EXPECT_EQ(seen->status().code(), absl::StatusCode::kInvalidArgument);
}

// An elastic PS job's servers learn each generation a group forms, and
// that a member joining a formed group makes it form the next one.
TEST(GroupRendezvousTest, TheObserverHearsOfEachGeneration) {
  std::vector<std::pair<std::string, int64_t>> heard;
  std::vector<int> members;
  GroupRendezvous groups([&](const std::string& group, int64_t g,
                             const std::vector<int>& formed) {
    heard.emplace_back(group, g);
    members = formed;
  });
  Result a, b, c;
  groups.Join(Req(0, 0, 1, 2, "ps"), Into(&a));
  EXPECT_TRUE(heard.empty()) << "no group has formed yet";
  groups.Join(Req(1, 0, 2, 2, "ps"), Into(&b));
  ASSERT_TRUE(a.has_value() && a->ok());
  using Heard = std::vector<std::pair<std::string, int64_t>>;
  EXPECT_EQ(heard, (Heard{{"ps", 1}}));
  EXPECT_EQ(members, (std::vector<int>{0, 1})) << "who formed generation 1";
  groups.Join(Req(0, 3, 3, 2, "ps"), Into(&c));  // Rank 0 again: re-form.
  EXPECT_EQ(heard, (Heard{{"ps", 1}, {"ps", 2}}));
  EXPECT_TRUE(members.empty()) << "generation 2 has not formed";
  EXPECT_FALSE(c.has_value());
}

}  // namespace
}  // namespace lockstep
