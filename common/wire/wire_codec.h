// Encoding of fp32 tensors as raw little-endian bytes for `bytes` fields.
// Lockstep runs on little-endian hosts only (checked at compile time), so
// fp32 encoding is one memcpy each way. bf16 and fp16 halve the bytes on the
// wire: values are rounded to nearest-even when encoded and widened back to
// fp32 exactly when decoded; servers always accumulate and keep fp32.
#ifndef LOCKSTEP_COMMON_WIRE_WIRE_CODEC_H_
#define LOCKSTEP_COMMON_WIRE_WIRE_CODEC_H_

#include <cstddef>
#include <cstdint>
#include <string>

#include "absl/status/status.h"
#include "absl/status/statusor.h"
#include "absl/strings/string_view.h"
#include "absl/types/span.h"
#include "common/base/work_pool.h"

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
// The server's one visit to a push: checks every element is finite, then
// adds the payload into `sum` -- or, with `overwrite`, writes it there (the
// first push of a step, onto an accumulator that holds something else).
// The check runs over the whole payload before anything is written, so a
// refused push (INVALID_ARGUMENT naming the element) leaves `sum` as it
// was; the two reads are back to back, the second from cache when the
// payload fits in it (chunks of auto size do: common/model/chunk_plan.h). The
// caller has checked the size.
// With a `pool`, both passes are split over its threads in blocks of
// `grain` elements (the same bits: each element is summed on its own).
absl::Status AccumulateCheckedPieces(absl::Span<const absl::string_view> pieces,
                                     WireDType dtype, absl::Span<float> sum,
                                     bool overwrite, WorkPool* pool = nullptr,
                                     int64_t grain = 0);
// The same without the check, for a payload checked before.
void AccumulateUncheckedPieces(absl::Span<const absl::string_view> pieces,
                               WireDType dtype, absl::Span<float> sum,
                               bool overwrite, WorkPool* pool = nullptr,
                               int64_t grain = 0);
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

#endif  // LOCKSTEP_COMMON_WIRE_WIRE_CODEC_H_
