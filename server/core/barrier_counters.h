// The counters every chunk of a shard adds to (ServerCounters reads them):
// pushes accepted, refused (by status code) and dropped late, steps, the
// time spent summing, applying and waiting, and bytes received.
// Thread-safe: relaxed atomics, updated without a lock.
#ifndef LOCKSTEP_SERVER_CORE_BARRIER_COUNTERS_H_
#define LOCKSTEP_SERVER_CORE_BARRIER_COUNTERS_H_

#include <atomic>
#include <cstdint>

#include "absl/status/status.h"

namespace lockstep {

struct BarrierCounters {
  std::atomic<int64_t> pushes_accepted{0};
  std::atomic<int64_t> pushes_refused{0};
  std::atomic<int64_t> pushes_dropped_late{0};
  std::atomic<int64_t> chunk_steps{0};
  std::atomic<int64_t> accumulate_ns{0};
  std::atomic<int64_t> apply_ns{0};
  std::atomic<int64_t> barrier_wait_ns{0};
  std::atomic<int64_t> bytes_received{0};
  // pushes_refused by absl::StatusCode: OK (0) through UNAUTHENTICATED.
  static constexpr int kStatusCodes =
      static_cast<int>(absl::StatusCode::kUnauthenticated) + 1;
  std::atomic<int64_t> pushes_refused_by_code[kStatusCodes] = {};

  void CountRefused(absl::StatusCode code) {
    pushes_refused.fetch_add(1, std::memory_order_relaxed);
    const int index = static_cast<int>(code);
    const int unknown = static_cast<int>(absl::StatusCode::kUnknown);
    pushes_refused_by_code[index >= 0 && index < kStatusCodes ? index : unknown]
        .fetch_add(1, std::memory_order_relaxed);
  }
};

}  // namespace lockstep

#endif  // LOCKSTEP_SERVER_CORE_BARRIER_COUNTERS_H_
