// MetricRounds: means by hand, and every way a round fails for all of its
// ranks at once rather than leaving one waiting.
#include "server/core/metric_rounds.h"

#include <optional>
#include <string>
#include <vector>

#include "gmock/gmock.h"
#include "gtest/gtest.h"

namespace lockstep {
namespace {

using ::testing::ElementsAre;
using ::testing::HasSubstr;

struct Answer {
  std::optional<absl::StatusOr<std::vector<double>>> result;
  MetricRounds::Callback Callback() {
    return [this](absl::StatusOr<std::vector<double>> r) {
      result = std::move(r);
    };
  }
  std::string message() const {
    return std::string(result->status().message());
  }
};

TEST(MetricRoundsTest, AnswersEveryRankWithTheMeanOnceAllHaveSent) {
  MetricRounds rounds(3);
  Answer a, b, c;
  rounds.Contribute(0, 0, "loss,acc", {1.0, 0.5}, a.Callback());
  rounds.Contribute(2, 0, "loss,acc", {2.0, 0.25}, c.Callback());
  EXPECT_FALSE(a.result.has_value() || c.result.has_value());
  rounds.Contribute(1, 0, "loss,acc", {6.0, 0.0}, b.Callback());
  for (Answer* x : {&a, &b, &c}) {
    ASSERT_TRUE(x->result.has_value() && x->result->ok());
    EXPECT_THAT(**x->result, ElementsAre(3.0, 0.25));  // (1+2+6)/3, .75/3.
  }
  // The next round is a new one; a retry of round 0 gets its answer.
  Answer again, next;
  rounds.Contribute(1, 0, "loss,acc", {6.0, 0.0}, again.Callback());
  ASSERT_TRUE(again.result.has_value() && again.result->ok());
  EXPECT_THAT(**again.result, ElementsAre(3.0, 0.25));
  rounds.Contribute(0, 1, "loss,acc", {9.0, 9.0}, next.Callback());
  EXPECT_FALSE(next.result.has_value());
}

TEST(MetricRoundsTest, ARankSendingTwiceCountsOnce) {
  MetricRounds rounds(2);
  Answer a, a_again, b;
  rounds.Contribute(0, 0, "", {4.0}, a.Callback());
  rounds.Contribute(0, 0, "", {4.0}, a_again.Callback());
  rounds.Contribute(1, 0, "", {0.0}, b.Callback());
  for (Answer* x : {&a, &a_again, &b}) {
    ASSERT_TRUE(x->result.has_value() && x->result->ok());
    EXPECT_THAT(**x->result, ElementsAre(2.0));
  }
}

TEST(MetricRoundsTest, RanksThatDisagreeFailTheRoundForAll) {
  MetricRounds rounds(3);
  Answer a, b, late;
  rounds.Contribute(0, 0, "loss", {1.0}, a.Callback());
  rounds.Contribute(1, 0, "accuracy", {1.0}, b.Callback());
  ASSERT_TRUE(a.result.has_value() && b.result.has_value());
  EXPECT_EQ(a.result->status().code(), absl::StatusCode::kFailedPrecondition);
  EXPECT_EQ(b.result->status(), a.result->status());
  EXPECT_THAT(a.message(), HasSubstr("rank 1 sent 'accuracy' (1 values), an "
                                     "earlier rank 'loss' (1)"));
  rounds.Contribute(2, 0, "loss", {1.0}, late.Callback());
  ASSERT_TRUE(late.result.has_value());
  EXPECT_EQ(late.result->status(), a.result->status());

  Answer x, y;
  rounds.Contribute(0, 1, "loss", {1.0}, x.Callback());
  rounds.Contribute(1, 1, "loss", {1.0, 2.0}, y.Callback());
  ASSERT_TRUE(x.result.has_value());
  EXPECT_THAT(x.message(), HasSubstr("(2 values)"));
}

TEST(MetricRoundsTest, ARankThatLeavesFailsTheRoundsWaitingForIt) {
  MetricRounds rounds(2);
  Answer a;
  rounds.Contribute(0, 0, "loss", {1.0}, a.Callback());
  rounds.Leave(0);  // It sent its values: nothing waits for it.
  EXPECT_FALSE(a.result.has_value());
  rounds.Leave(1);
  ASSERT_TRUE(a.result.has_value());
  EXPECT_EQ(a.result->status().code(), absl::StatusCode::kFailedPrecondition);
  EXPECT_EQ(a.message(),
            "rank 1 left the job while average round 0 ('loss') waited for it");
}

TEST(MetricRoundsTest, RefusesWhatItCannotAverage) {
  MetricRounds rounds(2);
  Answer nan, many, negative;
  rounds.Contribute(0, 0, "m", {std::nan("")}, nan.Callback());
  rounds.Contribute(0, 0, "m",
                    std::vector<double>(MetricRounds::kMaxValues + 1, 0.0),
                    many.Callback());
  rounds.Contribute(0, -1, "m", {1.0}, negative.Callback());
  for (Answer* x : {&nan, &many, &negative}) {
    ASSERT_TRUE(x->result.has_value());
    EXPECT_EQ(x->result->status().code(), absl::StatusCode::kInvalidArgument);
  }
  EXPECT_THAT(nan.message(), HasSubstr("non-finite"));
}

TEST(MetricRoundsTest, ShutdownAnswersTheWaitingAndRefusesNewRounds) {
  MetricRounds rounds(2);
  Answer a, b;
  rounds.Contribute(0, 0, "m", {1.0}, a.Callback());
  rounds.Shutdown(absl::UnavailableError("server is shutting down"));
  ASSERT_TRUE(a.result.has_value());
  EXPECT_EQ(a.result->status().code(), absl::StatusCode::kUnavailable);
  rounds.Contribute(1, 0, "m", {1.0}, b.Callback());
  ASSERT_TRUE(b.result.has_value());
  EXPECT_EQ(b.result->status().code(), absl::StatusCode::kUnavailable);
}

}  // namespace
}  // namespace lockstep
