#include "common/wire/wire_codec.h"

#include <algorithm>
#include <array>
#include <atomic>
#include <cmath>
#include <cstdint>
#include <cstring>
#include <optional>
#include <vector>

#include "absl/base/config.h"
#include "absl/strings/str_cat.h"
#include "common/kernels/kernels.h"

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
  return CheckFiniteEncoded(
      absl::string_view(reinterpret_cast<const char*>(values.data()),
                        values.size() * sizeof(float)),
      WireDType::kFloat32);
}

namespace {

uint16_t FloatToBfloat16(float f) {
  uint32_t bits;
  std::memcpy(&bits, &f, sizeof(bits));
  const bool nan = (bits & 0x7fffffffu) > 0x7f800000u;
  const uint32_t rounded = bits + 0x7fffu + ((bits >> 16) & 1u);  // Ties even.
  // Selects rather than branches, so the encode loop vectorizes.
  return static_cast<uint16_t>(nan ? 0x7fc0u : rounded >> 16);
}

uint32_t AsBits(float f) {
  uint32_t u;
  std::memcpy(&u, &f, sizeof(u));
  return u;
}

float FromBits(uint32_t u) {
  float f;
  std::memcpy(&f, &u, sizeof(f));
  return f;
}

// IEEE binary16 with round-to-nearest-even, by integer arithmetic (the
// approach of F. Giesen's "float_to_half_fast3_rtne"): no library call and
// no F16C instruction needed, so it is fast on any x86-64 build.
uint16_t FloatToHalf(float f) {
  constexpr uint32_t kF32Infinity = 255u << 23;
  constexpr uint32_t kF16Overflow = (127u + 16u) << 23;   // 2^16.
  constexpr uint32_t kDenormMagic = ((127u - 15u) + (23u - 10u) + 1u) << 23;
  uint32_t u = AsBits(f);
  const uint32_t sign = u & 0x80000000u;
  u ^= sign;
  uint16_t out;
  if (u >= kF16Overflow) {
    out = u > kF32Infinity ? 0x7e00 : 0x7c00;  // NaN stays NaN, else Inf.
  } else if (u < (113u << 23)) {
    // Result is subnormal (or zero): let the FPU round by adding a magic
    // number that aligns the mantissa.
    out = static_cast<uint16_t>(AsBits(FromBits(u) + FromBits(kDenormMagic)) -
                                kDenormMagic);
  } else {
    const uint32_t mantissa_odd = (u >> 13) & 1u;
    u += (static_cast<uint32_t>(15 - 127) << 23) + 0xfffu;  // Rebias, round.
    u += mantissa_odd;                                       // Ties to even.
    out = static_cast<uint16_t>(u >> 13);
  }
  return static_cast<uint16_t>(out | (sign >> 16));
}

int KernelIndex(WireDType dtype) { return static_cast<int>(dtype); }

}  // namespace

absl::StatusOr<WireDType> ParseWireDType(absl::string_view name) {
  if (name == "fp32") return WireDType::kFloat32;
  if (name == "bf16") return WireDType::kBfloat16;
  if (name == "fp16") return WireDType::kFloat16;
  return absl::InvalidArgumentError(
      absl::StrCat("wire dtype must be fp32, bf16 or fp16, got \"", name,
                   "\""));
}

const char* WireDTypeName(WireDType dtype) {
  switch (dtype) {
    case WireDType::kFloat32: return "fp32";
    case WireDType::kBfloat16: return "bf16";
    case WireDType::kFloat16: return "fp16";
  }
  return "?";
}

size_t BytesPerElement(WireDType dtype) {
  return dtype == WireDType::kFloat32 ? 4 : 2;
}

void EncodeTensor(absl::Span<const float> values, WireDType dtype,
                  std::string* out) {
  if (dtype == WireDType::kFloat32) return EncodeFloat32(values, out);
  out->resize(values.size() * 2);
  char* p = out->data();
  // One loop per type, so each is branch-free and vectorizes.
  if (dtype == WireDType::kBfloat16) {
    for (size_t i = 0; i < values.size(); ++i) {
      const uint16_t h = FloatToBfloat16(values[i]);
      std::memcpy(p + 2 * i, &h, sizeof(h));
    }
  } else {
    for (size_t i = 0; i < values.size(); ++i) {
      const uint16_t h = FloatToHalf(values[i]);
      std::memcpy(p + 2 * i, &h, sizeof(h));
    }
  }
}

absl::Status DecodeTensor(absl::string_view bytes, WireDType dtype,
                          absl::Span<float> out) {
  if (dtype == WireDType::kFloat32) return DecodeFloat32(bytes, out);
  if (bytes.size() != out.size() * 2) {
    return absl::InvalidArgumentError(
        absl::StrCat("payload has ", bytes.size(), " bytes, expected ",
                     out.size() * 2, " (", out.size(), " ",
                     WireDTypeName(dtype), " values)"));
  }
  // Assigned, not added to zero: 0 + (-0) would lose the sign.
  kernels::Active().decode[KernelIndex(dtype)](bytes.data(), out.size(),
                                               out.data());
  return absl::OkStatus();
}

void AccumulateTensor(absl::string_view bytes, WireDType dtype,
                      absl::Span<float> sum) {
  kernels::Active().accumulate[KernelIndex(dtype)](bytes.data(), sum.size(),
                                                   sum.data());
}

absl::Status CheckFiniteEncoded(absl::string_view bytes, WireDType dtype) {
  return CheckFinitePieces({bytes}, dtype);
}

}  // namespace lockstep
