// GroupRendezvous's quorum (JoinGroupRequest.quorum, elastic all-reduce): a
// round of fewer than every rank forms only with more than half of the
// ranks alive, so an elastic job never runs as two groups; the ranks that
// are gone stop counting after the grace, and a leaver at once.
#include <atomic>
#include <optional>
#include <string>
#include <vector>

#include "absl/synchronization/mutex.h"
#include "absl/time/clock.h"
#include "gtest/gtest.h"
#include "server/coordination/group_rendezvous.h"

namespace lockstep {
namespace {

using Group = GroupRendezvous::Group;

constexpr absl::Duration kSettle = absl::Milliseconds(50);
// Long enough that a round which may form does so well before it.
constexpr absl::Duration kFormed = absl::Seconds(20);
// How long a round that may not form is watched not forming.
constexpr absl::Duration kHeld = absl::Milliseconds(400);

GroupRendezvous::Request Req(int rank, int size, bool quorum = true) {
  GroupRendezvous::Request r;
  r.group = "job";
  r.member = 100 + static_cast<uint64_t>(rank);
  r.rank = rank;
  r.size = size;
  r.min_size = 1;
  r.settle = kSettle;
  r.quorum = quorum;
  return r;
}

// The answers of the members joined through it, from any thread.
class Answers {
 public:
  GroupRendezvous::Done For(int rank) {
    return [this, rank](absl::StatusOr<Group> g) {
      absl::MutexLock lock(&mu_);
      got_.push_back({rank, std::move(g)});
    };
  }
  // The answers once there are `n` (up to `timeout`), or those there are.
  std::vector<std::pair<int, absl::StatusOr<Group>>> Wait(size_t n,
                                                          absl::Duration
                                                              timeout) {
    absl::MutexLock lock(&mu_);
    auto enough = [this, n]() ABSL_EXCLUSIVE_LOCKS_REQUIRED(mu_) {
      return got_.size() >= n;
    };
    mu_.AwaitWithTimeout(absl::Condition(&enough), timeout);
    auto out = std::move(got_);
    got_.clear();
    return out;
  }

 private:
  absl::Mutex mu_;
  std::vector<std::pair<int, absl::StatusOr<Group>>> got_ ABSL_GUARDED_BY(mu_);
};

// Joins `ranks` and returns the group they formed (all must get it).
Group Form(GroupRendezvous& groups, Answers& answers,
           const std::vector<int>& ranks, int size, bool quorum = true) {
  for (int rank : ranks) groups.Join(Req(rank, size, quorum), answers.For(rank));
  auto got = answers.Wait(ranks.size(), kFormed);
  EXPECT_EQ(got.size(), ranks.size());
  Group formed;
  for (auto& [rank, g] : got) {
    EXPECT_TRUE(g.ok()) << g.status();
    if (g.ok()) formed = *g;
  }
  return formed;
}

GroupRendezvous::WaiterId WatchAs(GroupRendezvous& groups, int rank,
                                  int64_t generation, bool alive_only = false) {
  return groups.Watch(
      "job", generation, [](absl::StatusOr<int>) {}, rank, alive_only);
}

TEST(GroupQuorumTest, AMinorityOfTheAliveRanksWaitsInsteadOfFormingASecond) {
  GroupRendezvous groups(nullptr, absl::Seconds(60));
  Answers answers;
  ASSERT_EQ(Form(groups, answers, {0, 1, 2, 3}, 4).members.size(), 4u);
  // Ranks 2 and 3 still train in generation 1 and watch it; 0 and 1 saw a
  // step fail and join again: two of four alive, not a majority.
  WatchAs(groups, 2, 1);
  WatchAs(groups, 3, 1);
  groups.Join(Req(0, 4), answers.For(0));
  groups.Join(Req(1, 4), answers.For(1));
  EXPECT_TRUE(answers.Wait(1, kHeld).empty())
      << "half of the ranks alive formed a group";
  EXPECT_EQ(groups.NumWaiting(), 2u);
  // Rank 2 comes (its watch said someone waits): three of four.
  groups.Join(Req(2, 4), answers.For(2));
  auto got = answers.Wait(3, kFormed);
  ASSERT_EQ(got.size(), 3u);
  for (auto& [rank, g] : got) {
    ASSERT_TRUE(g.ok()) << g.status();
    EXPECT_EQ(g->generation, 2);
    EXPECT_EQ(g->members, (std::vector<int>{0, 1, 2}));
  }
  // Rank 3 noticed late: alone against the three just formed, it waits
  // for them, and they join it at their next step.
  groups.Join(Req(3, 4), answers.For(3));
  EXPECT_TRUE(answers.Wait(1, kHeld).empty())
      << "a late rank formed a second group beside the first";
  for (int rank : {0, 1, 2}) groups.Join(Req(rank, 4), answers.For(rank));
  got = answers.Wait(4, kFormed);
  ASSERT_EQ(got.size(), 4u);
  for (auto& [rank, g] : got) {
    ASSERT_TRUE(g.ok()) << g.status();
    EXPECT_EQ(g->generation, 3);
    EXPECT_EQ(g->members.size(), 4u);
  }
}

TEST(GroupQuorumTest, WithoutAQuorumHalfTheRanksFormAtOnce) {
  GroupRendezvous groups(nullptr, absl::Seconds(60));
  Answers answers;
  Form(groups, answers, {0, 1, 2, 3}, 4, /*quorum=*/false);
  WatchAs(groups, 2, 1);
  WatchAs(groups, 3, 1);
  const Group g = Form(groups, answers, {0, 1}, 4, /*quorum=*/false);
  EXPECT_EQ(g.members, (std::vector<int>{0, 1}));
  EXPECT_EQ(g.generation, 2);
}

TEST(GroupQuorumTest, RanksGoneStopCountingAfterTheGraceALeaverAtOnce) {
  const absl::Duration grace = absl::Milliseconds(600);
  GroupRendezvous groups(nullptr, grace);
  Answers answers;
  Form(groups, answers, {0, 1, 2}, 3);
  // Ranks 1 and 2 die: their watches end (the connection closed).
  const GroupRendezvous::WaiterId w1 = WatchAs(groups, 1, 1);
  const GroupRendezvous::WaiterId w2 = WatchAs(groups, 2, 1);
  ASSERT_NE(w1, 0);
  ASSERT_NE(w2, 0);
  const absl::Time gone = absl::Now();
  ASSERT_TRUE(groups.Cancel(w1));
  ASSERT_TRUE(groups.Cancel(w2));
  groups.Join(Req(0, 3), answers.For(0));
  auto got = answers.Wait(1, kFormed);
  const absl::Duration took = absl::Now() - gone;
  ASSERT_EQ(got.size(), 1u);
  ASSERT_TRUE(got[0].second.ok()) << got[0].second.status();
  EXPECT_EQ(got[0].second->members, (std::vector<int>{0}));
  EXPECT_GE(took, grace) << "formed while the others still counted";

  // A two-rank job whose rank 0 leaves (its watch ends, then it says it
  // leaves): rank 1 forms alone without waiting out the grace.
  GroupRendezvous quick(nullptr, absl::Seconds(60));
  Form(quick, answers, {0, 1}, 2);
  const GroupRendezvous::WaiterId w0 = WatchAs(quick, 0, 1);
  ASSERT_TRUE(quick.Cancel(w0));
  quick.Forget("job", 0);
  quick.Join(Req(1, 2), answers.For(1));
  got = answers.Wait(1, kFormed);
  ASSERT_EQ(got.size(), 1u);
  ASSERT_TRUE(got[0].second.ok());
  EXPECT_EQ(got[0].second->members, (std::vector<int>{1}));
}

// Ranks told that someone waits stay alive past the grace while they
// finish a long step: their alive-only watch (the worker's, once woken) is
// open, and it is not answered by the waiting members. Without it, half of
// the ranks formed a group beside them once the grace had passed.
TEST(GroupQuorumTest, AWokenRankStaysAliveThroughALongStep) {
  const absl::Duration grace = absl::Milliseconds(300);
  GroupRendezvous groups(nullptr, grace);
  Answers answers;
  Form(groups, answers, {0, 1, 2, 3}, 4);
  WatchAs(groups, 2, 1);
  WatchAs(groups, 3, 1);
  groups.Join(Req(0, 4), answers.For(0));  // Wakes 2 and 3.
  groups.Join(Req(1, 4), answers.For(1));
  ASSERT_NE(WatchAs(groups, 2, 1, /*alive_only=*/true), 0);
  ASSERT_NE(WatchAs(groups, 3, 1, /*alive_only=*/true), 0)
      << "an alive-only watch is not answered by members waiting";
  EXPECT_TRUE(answers.Wait(1, grace * 3).empty())
      << "two of four formed a group while the other two were alive";
  groups.Join(Req(2, 4), answers.For(2));
  groups.Join(Req(3, 4), answers.For(3));
  auto got = answers.Wait(4, kFormed);
  ASSERT_EQ(got.size(), 4u);
  EXPECT_EQ(got[0].second->members.size(), 4u);
}

// A leaver's watch may end at the coordinator after it said it leaves: that
// late end does not make it count as alive again.
TEST(GroupQuorumTest, ALeaversLateWatchEndDoesNotRevive) {
  GroupRendezvous groups(nullptr, absl::Seconds(60));
  Answers answers;
  Form(groups, answers, {0, 1}, 2);
  const GroupRendezvous::WaiterId w0 = WatchAs(groups, 0, 1);
  groups.Forget("job", 0);
  ASSERT_TRUE(groups.Cancel(w0));
  groups.Join(Req(1, 2), answers.For(1));
  auto got = answers.Wait(1, kFormed);
  ASSERT_EQ(got.size(), 1u);
  ASSERT_TRUE(got[0].second.ok());
  EXPECT_EQ(got[0].second->members, (std::vector<int>{1}));
}

}  // namespace
}  // namespace lockstep
