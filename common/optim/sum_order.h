// SumOrder: the order in which a synchronous step sums its workers'
// gradients, and its names: the one definition of what the server's
// --sum_order and the launcher's --sum_order accept.
//
// Float addition is not associative: with three or more workers the order
// changes the last bits of the result.
//   kArrival  "arrival": each push is added as it arrives, then released:
//             the server holds one accumulator per chunk whatever W is.
//   kRank     "rank": ascending rank, whatever the arrival order, so that a
//             run (or a run recovered from a fault) gives the same bits
//             every time. A push that arrives before a lower rank's is
//             copied and held until that one is summed: up to W - 1 extra
//             copies of a chunk's payload. With one or two workers both
//             orders are the same sum and nothing is held.
#ifndef LOCKSTEP_COMMON_OPTIM_SUM_ORDER_H_
#define LOCKSTEP_COMMON_OPTIM_SUM_ORDER_H_

#include "absl/status/statusor.h"
#include "absl/strings/string_view.h"

namespace lockstep {

enum class SumOrder { kArrival, kRank };

// The flag value that means `order`: "arrival" or "rank".
absl::string_view SumOrderName(SumOrder order);

// The order a flag value names; INVALID_ARGUMENT `must be arrival or rank,
// got "NAME"` for any other (the caller prefixes the flag's name).
absl::StatusOr<SumOrder> ParseSumOrder(absl::string_view name);

}  // namespace lockstep

#endif  // LOCKSTEP_COMMON_OPTIM_SUM_ORDER_H_
