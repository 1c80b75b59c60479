// Encoding of fp32 tensors as raw little-endian bytes for `bytes` fields.
// Lockstep runs on little-endian hosts only (checked at compile time), so
// fp32 encoding is one memcpy each way.
#ifndef LOCKSTEP_COMMON_WIRE_CODEC_H_
#define LOCKSTEP_COMMON_WIRE_CODEC_H_

#include <string>

#include "absl/status/status.h"
#include "absl/strings/string_view.h"
#include "absl/types/span.h"

namespace lockstep {

// Replaces `*out` with the bytes of `values`.
void EncodeFloat32(absl::Span<const float> values, std::string* out);

// Decodes `bytes` into `out`; INVALID_ARGUMENT unless the byte count is
// exactly 4 * out.size().
absl::Status DecodeFloat32(absl::string_view bytes, absl::Span<float> out);

// INVALID_ARGUMENT naming the first NaN or Inf element, OK when all finite.
absl::Status CheckFinite(absl::Span<const float> values);

}  // namespace lockstep

#endif  // LOCKSTEP_COMMON_WIRE_CODEC_H_
