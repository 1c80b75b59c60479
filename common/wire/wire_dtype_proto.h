// WireDType against lockstep.v1.DType, and which dtype a chunk travels in:
// shared by the server's transport and the workers' client.
#ifndef LOCKSTEP_COMMON_WIRE_WIRE_DTYPE_PROTO_H_
#define LOCKSTEP_COMMON_WIRE_WIRE_DTYPE_PROTO_H_

#include "absl/status/statusor.h"
#include "absl/strings/str_cat.h"
#include "common/model/chunk_plan.h"
#include "common/wire/wire_codec.h"
#include "lockstep/v1/lockstep.pb.h"

namespace lockstep {

// INVALID_ARGUMENT for a value the enum does not name; unspecified is fp32.
inline absl::StatusOr<WireDType> FromProtoDType(v1::DType dtype) {
  switch (dtype) {
    case v1::DTYPE_UNSPECIFIED:
    case v1::DTYPE_FLOAT32:
      return WireDType::kFloat32;
    case v1::DTYPE_BFLOAT16:
      return WireDType::kBfloat16;
    case v1::DTYPE_FLOAT16:
      return WireDType::kFloat16;
    default:
      return absl::InvalidArgumentError(
          absl::StrCat("unknown dtype ", static_cast<int>(dtype)));
  }
}

inline v1::DType ToProtoDType(WireDType dtype) {
  switch (dtype) {
    case WireDType::kFloat32:
      return v1::DTYPE_FLOAT32;
    case WireDType::kBfloat16:
      return v1::DTYPE_BFLOAT16;
    case WireDType::kFloat16:
      return v1::DTYPE_FLOAT16;
  }
  return v1::DTYPE_UNSPECIFIED;
}

// The dtype `chunk` travels in when the job chose `wire`: parameters as
// chosen, state chunks (batch-norm moving statistics) always fp32, since a
// moving average rounded to bf16 every step stops moving once its steps are
// below half a bf16 step.
inline WireDType ChunkWireDType(const Chunk& chunk, WireDType wire) {
  return chunk.state ? WireDType::kFloat32 : wire;
}

}  // namespace lockstep

#endif  // LOCKSTEP_COMMON_WIRE_WIRE_DTYPE_PROTO_H_
