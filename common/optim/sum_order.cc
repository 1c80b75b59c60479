#include "common/optim/sum_order.h"

#include "absl/status/status.h"
#include "absl/strings/str_cat.h"

namespace lockstep {

absl::string_view SumOrderName(SumOrder order) {
  return order == SumOrder::kRank ? "rank" : "arrival";
}

absl::StatusOr<SumOrder> ParseSumOrder(absl::string_view name) {
  for (SumOrder order : {SumOrder::kArrival, SumOrder::kRank}) {
    if (name == SumOrderName(order)) return order;
  }
  return absl::InvalidArgumentError(
      absl::StrCat("must be ", SumOrderName(SumOrder::kArrival), " or ",
                   SumOrderName(SumOrder::kRank), ", got \"", name, "\""));
}

}  // namespace lockstep
