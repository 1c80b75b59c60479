// The checks a push passes before its gradient is summed, in one place,
// with the one function that counts a refused push. A push meets them in
// this order; the first that fails answers it, counted once (RefusePush):
//   ParameterServer::Push  the server is open; the rank is in range and
//                          the incarnation its own; the step is one a
//                          draining server still takes; the chunk index
//                          is in range and this shard's; the payload has
//                          the chunk's size in its dtype (CheckPayloadSize).
//   ChunkBarrier::Push     the chunk is open and initialized; the step is
//                          not negative (CheckStepNotNegative) and is one
//                          its sync rule takes; the values are finite,
//                          checked as they are summed, in one pass
//                          (NotFiniteError names the chunk).
// Before these the transport (server/rpc) has only parsed the request and
// its dtype: a request it cannot read is not a push and is not counted.
// Rank 0's initialization carries fp32 weights and meets the same size and
// finiteness checks.
#ifndef LOCKSTEP_SERVER_CORE_PUSH_CHECKS_H_
#define LOCKSTEP_SERVER_CORE_PUSH_CHECKS_H_

#include <cstdint>

#include "absl/status/status.h"
#include "absl/strings/string_view.h"
#include "absl/types/span.h"
#include "common/model/chunk_plan.h"
#include "common/wire/wire_codec.h"
#include "server/core/barrier_counters.h"

namespace lockstep {

// The step of a call that is not a push (an initialization, a pull): no
// step to check against a drain or to note for the rank.
inline constexpr int64_t kNotAPush = -1;

// INVALID_ARGUMENT unless `payload` holds exactly `chunk`'s values as
// `dtype`.
absl::Status CheckPayloadSize(absl::Span<const absl::string_view> payload,
                              WireDType dtype, const Chunk& chunk);

// INVALID_ARGUMENT for a negative step.
absl::Status CheckStepNotNegative(int64_t step);

// `found` (a NaN or Inf, from the kernels' check) as INVALID_ARGUMENT
// naming chunk `chunk`.
absl::Status NotFiniteError(int chunk, const absl::Status& found);

// Counts `refusal` as a refused push (BarrierCounters::CountRefused) and
// returns it, for the push's answer.
inline absl::Status RefusePush(BarrierCounters* counters,
                               absl::Status refusal) {
  counters->CountRefused(refusal.code());
  return refusal;
}

}  // namespace lockstep

#endif  // LOCKSTEP_SERVER_CORE_PUSH_CHECKS_H_
