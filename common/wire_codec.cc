#include "common/wire_codec.h"

#include <cmath>
#include <cstdint>
#include <cstring>

#include "absl/base/config.h"
#include "absl/strings/str_cat.h"

namespace lockstep {

#if !defined(ABSL_IS_LITTLE_ENDIAN)
#error "Lockstep's wire format assumes a little-endian host."
#endif

void EncodeFloat32(absl::Span<const float> values, std::string* out) {
  out->resize(values.size() * sizeof(float));
  if (!values.empty()) {
    std::memcpy(out->data(), values.data(), out->size());
  }
}

absl::Status DecodeFloat32(absl::string_view bytes, absl::Span<float> out) {
  if (bytes.size() != out.size() * sizeof(float)) {
    return absl::InvalidArgumentError(
        absl::StrCat("payload has ", bytes.size(), " bytes, expected ",
                     out.size() * sizeof(float), " (", out.size(),
                     " float32 values)"));
  }
  if (!out.empty()) std::memcpy(out.data(), bytes.data(), bytes.size());
  return absl::OkStatus();
}

absl::Status CheckFinite(absl::Span<const float> values) {
  // A branch-free pass over the exponent bits that the compiler vectorizes;
  // the slow search runs only when something is wrong.
  constexpr uint32_t kExponent = 0x7f800000u;
  uint32_t bad = 0;
  for (float v : values) {
    uint32_t bits;
    std::memcpy(&bits, &v, sizeof(bits));
    bad |= static_cast<uint32_t>((bits & kExponent) == kExponent);
  }
  if (bad == 0) return absl::OkStatus();
  for (size_t i = 0; i < values.size(); ++i) {
    if (!std::isfinite(values[i])) {
      return absl::InvalidArgumentError(
          absl::StrCat("element ", i, " is ", values[i], " (not finite)"));
    }
  }
  return absl::OkStatus();
}

}  // namespace lockstep
