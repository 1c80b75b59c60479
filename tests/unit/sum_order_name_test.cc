// SumOrder's names (common/optim/sum_order.h): the one definition the server's and
// the launcher's --sum_order both parse with.
#include "absl/status/status.h"
#include "common/optim/sum_order.h"
#include "gtest/gtest.h"

namespace lockstep {
namespace {

TEST(SumOrderNameTest, EachOrderHasTheNameItParsesFrom) {
  EXPECT_EQ(SumOrderName(SumOrder::kArrival), "arrival");
  EXPECT_EQ(SumOrderName(SumOrder::kRank), "rank");
  for (SumOrder order : {SumOrder::kArrival, SumOrder::kRank}) {
    absl::StatusOr<SumOrder> parsed = ParseSumOrder(SumOrderName(order));
    ASSERT_TRUE(parsed.ok()) << parsed.status();
    EXPECT_EQ(*parsed, order);
  }
}

TEST(SumOrderNameTest, AnyOtherNameIsRefusedWithTheValidOnes) {
  for (const char* name : {"random", "", "Rank", "rank ", "arrival,rank"}) {
    absl::StatusOr<SumOrder> parsed = ParseSumOrder(name);
    ASSERT_FALSE(parsed.ok()) << name;
    EXPECT_EQ(parsed.status().code(), absl::StatusCode::kInvalidArgument);
    EXPECT_EQ(parsed.status().message(),
              std::string("must be arrival or rank, got \"") + name + "\"");
  }
}

}  // namespace
}  // namespace lockstep
