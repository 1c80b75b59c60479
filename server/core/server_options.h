// The options of one parameter-server shard, which its parts (membership,
// step barriers, recovery) read too.
#ifndef LOCKSTEP_SERVER_CORE_SERVER_OPTIONS_H_
#define LOCKSTEP_SERVER_CORE_SERVER_OPTIONS_H_

#include <cstdint>

#include "common/base/env.h"
#include "common/base/work_pool.h"
#include "common/optim/sum_order.h"
#include "server/core/barrier_observer.h"

namespace lockstep {

struct ParameterServerOptions {
  int num_workers = 1;  // Workers in every synchronous step.
  int shard = 0;        // This server's index among num_shards.
  int num_shards = 1;   // Chunks are spread over shards by ChunkPlan.
  BarrierObserver* observer = nullptr;      // Not owned; may be null.
  SumOrder sum_order = SumOrder::kArrival;  // Synchronous steps' sums.
  // Splits each chunk's sums and optimizer step (--server_threads); not
  // owned, outlives the server; null: each on the calling thread.
  WorkPool* pool = nullptr;
  // Most bytes the model's state on this shard may take (its weights, the
  // sum, a copy for exact pulls and the optimizer's slots); a signature
  // needing more is refused with RESOURCE_EXHAUSTED before anything is
  // allocated. 0: no bound.
  int64_t max_state_bytes = 0;
  // Synchronous jobs: every chunk keeps the state of each version that is
  // a multiple of this (ChunkBarrier::PinEvery) for a checkpoint, so that
  // every shard saves the same versions. 0: none.
  int64_t checkpoint_every_steps = 0;
  // The clock of arrivals, contacts and step timeouts, and the sleeps of
  // Snapshot's wait (the server's incarnation reads the real clock); not
  // owned.
  Env* env = Env::Default();
};

}  // namespace lockstep

#endif  // LOCKSTEP_SERVER_CORE_SERVER_OPTIONS_H_
