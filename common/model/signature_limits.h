// Bounds on what a model signature may ask a server to allocate, checked
// before anything is allocated for it. A registration is the one request
// whose size on the wire (a few bytes of shape) says nothing about the
// memory it costs (weights, optimizer slots and accumulators for every
// parameter), so a server checks every signature against these limits
// first: shapes must be non-negative and their products must not overflow,
// and the model, the chunk and the chunk count must stay within bounds.
#ifndef LOCKSTEP_COMMON_MODEL_SIGNATURE_LIMITS_H_
#define LOCKSTEP_COMMON_MODEL_SIGNATURE_LIMITS_H_

#include <cstdint>

#include "absl/status/status.h"
#include "common/model/model_signature.h"

namespace lockstep {

struct SignatureLimits {
  // Largest chunk a worker may send (the server's message limit follows it).
  int64_t max_chunk_bytes = kDefaultChunkBytes;
  // Largest model, in fp32 parameters (2^30: 4 GiB of weights).
  int64_t max_parameters = int64_t{1} << 30;
  int max_tensors = 1 << 16;
  int max_dims = 8;           // Per tensor.
  int max_name_bytes = 1024;  // Per tensor name and optimizer name.
  // Every chunk costs a barrier and an optimizer (about 1.4 KB) and a few
  // values per worker: 2^16 chunks (256 GiB of weights in 4 MiB chunks)
  // and 2^22 chunk x worker pairs bound that to a few hundred MB.
  int64_t max_chunks = 1 << 16;
  int64_t max_chunk_workers = 1 << 22;
  int max_workers = 1 << 16;
  int max_shards = 1 << 12;
};

// OK, or INVALID_ARGUMENT naming the first field out of bounds. Cheap:
// O(tensors x dims), allocates nothing.
absl::Status ValidateSignature(const ModelSignature& signature,
                               const SignatureLimits& limits);

}  // namespace lockstep

#endif  // LOCKSTEP_COMMON_MODEL_SIGNATURE_LIMITS_H_
