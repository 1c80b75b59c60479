// Encoding of fp32 tensors as raw little-endian bytes for `bytes` fields.
// Lockstep runs on little-endian hosts only (checked at compile time), so
// fp32 encoding is one memcpy each way. bf16 and fp16 halve the bytes on the
// wire: values are rounded to nearest-even when encoded and widened back to
// fp32 exactly when decoded; servers always accumulate and keep fp32.
#ifndef LOCKSTEP_COMMON_WIRE_CODEC_H_
#define LOCKSTEP_COMMON_WIRE_CODEC_H_

#include <cstddef>
#include <string>

#include "absl/status/status.h"
#include "absl/status/statusor.h"
#include "absl/strings/string_view.h"
#include "absl/types/span.h"

namespace lockstep {

enum class WireDType { kFloat32, kBfloat16, kFloat16 };

// "fp32", "bf16" or "fp16".
absl::StatusOr<WireDType> ParseWireDType(absl::string_view name);
const char* WireDTypeName(WireDType dtype);
size_t BytesPerElement(WireDType dtype);

// Replaces `*out` with `values` encoded as `dtype`.
void EncodeTensor(absl::Span<const float> values, WireDType dtype,
                  std::string* out);

// Decodes into `out`; INVALID_ARGUMENT unless the byte count is exactly
// out.size() elements of `dtype`.
absl::Status DecodeTensor(absl::string_view bytes, WireDType dtype,
                          absl::Span<float> out);

// sum[i] += decoded element i. The caller has checked the size.
void AccumulateTensor(absl::string_view bytes, WireDType dtype,
                      absl::Span<float> sum);

// INVALID_ARGUMENT naming the first NaN or Inf element of an encoded tensor.
absl::Status CheckFiniteEncoded(absl::string_view bytes, WireDType dtype);

// The same three operations on a payload that arrives in pieces (gRPC's
// slices), read in place: an element may straddle two pieces.
size_t PiecesSize(absl::Span<const absl::string_view> pieces);
absl::Status CheckFinitePieces(absl::Span<const absl::string_view> pieces,
                               WireDType dtype);
void AccumulatePieces(absl::Span<const absl::string_view> pieces,
                      WireDType dtype, absl::Span<float> sum);
// INVALID_ARGUMENT unless the pieces hold exactly out.size() elements.
absl::Status DecodePieces(absl::Span<const absl::string_view> pieces,
                          WireDType dtype, absl::Span<float> out);

// Replaces `*out` with the bytes of `values`.
void EncodeFloat32(absl::Span<const float> values, std::string* out);

// Decodes `bytes` into `out`; INVALID_ARGUMENT unless the byte count is
// exactly 4 * out.size().
absl::Status DecodeFloat32(absl::string_view bytes, absl::Span<float> out);

// INVALID_ARGUMENT naming the first NaN or Inf element, OK when all finite.
absl::Status CheckFinite(absl::Span<const float> values);

}  // namespace lockstep

#endif  // LOCKSTEP_COMMON_WIRE_CODEC_H_
