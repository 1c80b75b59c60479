// When a worker last called the coordinator (any Coordinator RPC that
// passed the Authorizer). The daemon's JobWatchdog counts it as worker
// contact, with the core's own (ActivityLog), for --no_worker_timeout_s:
// all-reduce ranks never call the parameter-server service while they
// train, only the coordinator (worker/exchange/allreduce/contact_thread.h).
//
// Thread-safe: one atomic.
#ifndef LOCKSTEP_SERVER_COORDINATION_CONTACT_CLOCK_H_
#define LOCKSTEP_SERVER_COORDINATION_CONTACT_CLOCK_H_

#include <atomic>
#include <cstdint>
#include <limits>

#include "absl/time/time.h"

namespace lockstep {

class ContactClock final {
 public:
  // Records a call at `when`; an earlier time than the latest is ignored.
  void Note(absl::Time when) {
    const int64_t ns = absl::ToUnixNanos(when);
    int64_t seen = latest_ns_.load(std::memory_order_relaxed);
    while (ns > seen && !latest_ns_.compare_exchange_weak(
                            seen, ns, std::memory_order_relaxed)) {
    }
  }

  // The latest call; InfinitePast before the first.
  absl::Time Latest() const {
    const int64_t ns = latest_ns_.load(std::memory_order_relaxed);
    if (ns == kNever) return absl::InfinitePast();
    return absl::FromUnixNanos(ns);
  }

 private:
  static constexpr int64_t kNever = std::numeric_limits<int64_t>::min();
  std::atomic<int64_t> latest_ns_{kNever};
};

}  // namespace lockstep

#endif  // LOCKSTEP_SERVER_COORDINATION_CONTACT_CLOCK_H_
