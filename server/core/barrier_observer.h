// What a shard's chunk barriers tell metrics and traces (server/
// server_telemetry.h) about the work they do.
//
// ChunkBarrier calls an observer after it has released its lock, on the
// thread of the push that did the work (a gRPC thread), so implementations
// must be thread-safe and cheap. A barrier without an observer does none of
// this bookkeeping.
#ifndef LOCKSTEP_SERVER_CORE_BARRIER_OBSERVER_H_
#define LOCKSTEP_SERVER_CORE_BARRIER_OBSERVER_H_

#include <cstdint>

#include "absl/time/time.h"
#include "absl/types/span.h"

namespace lockstep {

class BarrierObserver {
 public:
  virtual ~BarrierObserver() = default;

  // A push of `rank` for `step` was summed into chunk `chunk`'s accumulator
  // from `start` to `end`.
  virtual void OnAccumulate(int chunk, int64_t step, int rank,
                            absl::Time start, absl::Time end) = 0;

  // Chunk `chunk` applied the optimizer for `step` (publishing version
  // step + 1) from `start` to `end`.
  struct Applied {
    int chunk = 0;
    int64_t step = 0;
    absl::Time start;
    absl::Time end;
    // When the chunk published its previous version; InfinitePast for the
    // first update after version 0 was set or restored.
    absl::Time previous;
    // Sync mode: when each rank's push of this step arrived, by rank;
    // InfinitePast for a rank that did not push (backup workers). Empty in
    // the asynchronous modes.
    absl::Span<const absl::Time> arrivals;
  };
  virtual void OnApply(const Applied& applied) = 0;
};

}  // namespace lockstep

#endif  // LOCKSTEP_SERVER_CORE_BARRIER_OBSERVER_H_
