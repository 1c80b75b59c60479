#include "worker/exchange/ps/push_window.h"

#include <algorithm>

#include "absl/strings/numbers.h"
#include "absl/strings/str_cat.h"

namespace lockstep {

int AutoPushWindow(int num_workers, int64_t chunk_wire_bytes) {
  constexpr int64_t kBudget = int64_t{32} << 20;  // Per shard, all workers.
  const int64_t per_round = std::max<int64_t>(num_workers, 1) *
                            std::max<int64_t>(chunk_wire_bytes, 1);
  return static_cast<int>(std::clamp<int64_t>(kBudget / per_round, 1, 4));
}

int ResolvePushWindow(int requested, int num_workers, int64_t chunk_elements,
                      WireDType dtype) {
  if (requested != kAutoPushWindow) return requested;
  return AutoPushWindow(
      num_workers,
      chunk_elements * static_cast<int64_t>(BytesPerElement(dtype)));
}

absl::StatusOr<int> ParsePushWindow(absl::string_view text) {
  if (text == "auto") return kAutoPushWindow;
  int window = 0;
  if (!absl::SimpleAtoi(text, &window) || window < 0) {
    return absl::InvalidArgumentError(absl::StrCat(
        "push window must be auto or a count >= 0, got \"", text, "\""));
  }
  return window;
}

}  // namespace lockstep
