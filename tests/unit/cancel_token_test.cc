#include "worker/exchange/ps/cancel_token.h"

#include <vector>

#include "absl/time/clock.h"
#include "gmock/gmock.h"
#include "gtest/gtest.h"

namespace lockstep {
namespace {

// Cancel runs the cancellers of the calls still registered, once; a call
// added after it is cancelled as it is added.
TEST(CancelTokenTest, CancelsRegisteredCallsAndEveryLaterOne) {
  CancelToken token;
  std::vector<int> cancelled;
  token.Add([&] { cancelled.push_back(1); });
  const uint64_t ended = token.Add([&] { cancelled.push_back(2); });
  token.Add([&] { cancelled.push_back(3); });
  token.Remove(ended);
  EXPECT_FALSE(token.cancelled());
  EXPECT_TRUE(cancelled.empty());
  token.Cancel();
  EXPECT_TRUE(token.cancelled());
  EXPECT_EQ(cancelled, (std::vector<int>{1, 3}));
  EXPECT_EQ(token.Add([&] { cancelled.push_back(4); }), 0u);
  EXPECT_EQ(cancelled, (std::vector<int>{1, 3, 4}));
}

// A Leave keeps its deadline until the token is cancelled, then gets
// kLeaveAfterCancel at most.
TEST(CancelTokenTest, LeaveDeadlineIsShortOnceCancelled) {
  const absl::Time far = absl::Now() + absl::Seconds(60);
  EXPECT_EQ(CancelToken::LeaveDeadline(nullptr, far), far);
  CancelToken token;
  EXPECT_EQ(CancelToken::LeaveDeadline(&token, far), far);
  token.Cancel();
  const absl::Time before = absl::Now();
  const absl::Time deadline = CancelToken::LeaveDeadline(&token, far);
  EXPECT_GE(deadline, before + CancelToken::kLeaveAfterCancel);
  EXPECT_LE(deadline, absl::Now() + CancelToken::kLeaveAfterCancel);
  const absl::Time soon = absl::Now() + absl::Milliseconds(10);
  EXPECT_EQ(CancelToken::LeaveDeadline(&token, soon), soon);
}

}  // namespace
}  // namespace lockstep
