#include "server/core/push_checks.h"

#include <cstddef>

#include "absl/strings/str_cat.h"

namespace lockstep {

absl::Status CheckPayloadSize(absl::Span<const absl::string_view> payload,
                              WireDType dtype, const Chunk& chunk) {
  const size_t bytes = PiecesSize(payload);
  const size_t expected =
      static_cast<size_t>(chunk.size) * BytesPerElement(dtype);
  if (bytes != expected) {
    return absl::InvalidArgumentError(absl::StrCat(
        "chunk ", chunk.index, " payload has ", bytes, " bytes, expected ",
        expected, " (", chunk.size, " ", WireDTypeName(dtype), " values)"));
  }
  return absl::OkStatus();
}

absl::Status CheckStepNotNegative(int64_t step) {
  if (step >= 0) return absl::OkStatus();
  return absl::InvalidArgumentError(
      absl::StrCat("push for negative step ", step));
}

absl::Status NotFiniteError(int chunk, const absl::Status& found) {
  return absl::InvalidArgumentError(
      absl::StrCat("chunk ", chunk, ": ", found.message()));
}

}  // namespace lockstep
