#include "common/wire_codec.h"

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
#include "common/kernels.h"

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

namespace {

// Index of the first NaN or Inf in a contiguous encoded run. The
// vectorized pass of common/kernels.h comes first; the search runs only
// when something is wrong. Reads go through memcpy, so unaligned payloads
// are fine.
template <typename Bits>
std::optional<size_t> FindNonFiniteIn(const char* p, size_t n, Bits exponent) {
  for (size_t i = 0; i < n; ++i) {
    Bits bits;
    std::memcpy(&bits, p + sizeof(Bits) * i, sizeof(Bits));
    if ((bits & exponent) == exponent) return i;
  }
  return std::nullopt;
}

std::optional<size_t> FindNonFinite(absl::string_view bytes, WireDType dtype) {
  const size_t n = bytes.size() / BytesPerElement(dtype);
  if (!kernels::Active().any_nonfinite[KernelIndex(dtype)](bytes.data(), n)) {
    return std::nullopt;
  }
  switch (dtype) {
    case WireDType::kFloat32:
      return FindNonFiniteIn<uint32_t>(bytes.data(), n, 0x7f800000u);
    case WireDType::kBfloat16:
      return FindNonFiniteIn<uint16_t>(bytes.data(), n, 0x7f80);
    case WireDType::kFloat16:
      return FindNonFiniteIn<uint16_t>(bytes.data(), n, 0x7c00);
  }
  return std::nullopt;
}

// Calls fn(run, first_element, carried) for runs of whole elements in
// order: runs inside a piece are passed in place; an element split across
// pieces is assembled in a small buffer first (`carried`: the run points
// there, and only until fn returns).
template <typename Fn>
void ForEachRunOrCarried(absl::Span<const absl::string_view> pieces,
                         size_t width, Fn fn) {
  char carry[4];
  size_t carried = 0;
  size_t element = 0;
  for (absl::string_view piece : pieces) {
    if (carried > 0) {
      const size_t take = std::min(width - carried, piece.size());
      if (take > 0) std::memcpy(carry + carried, piece.data(), take);
      carried += take;
      piece.remove_prefix(take);
      if (carried < width) continue;
      fn(absl::string_view(carry, width), element++, true);
      carried = 0;
    }
    const size_t whole = piece.size() / width * width;
    if (whole > 0) {
      fn(piece.substr(0, whole), element, false);
      element += whole / width;
    }
    carried = piece.size() - whole;
    // memcpy from null (an empty piece's data) is undefined even for 0.
    if (carried > 0) std::memcpy(carry, piece.data() + whole, carried);
  }
}

// The same for callers that read each run at once: fn(run, first_element).
template <typename Fn>
void ForEachRun(absl::Span<const absl::string_view> pieces, size_t width,
                Fn fn) {
  ForEachRunOrCarried(
      pieces, width,
      [&](absl::string_view run, size_t first, bool) { fn(run, first); });
}

}  // namespace

size_t PiecesSize(absl::Span<const absl::string_view> pieces) {
  size_t n = 0;
  for (absl::string_view p : pieces) n += p.size();
  return n;
}

absl::Status CheckFinitePieces(absl::Span<const absl::string_view> pieces,
                               WireDType dtype) {
  std::optional<size_t> bad;
  ForEachRun(pieces, BytesPerElement(dtype),
             [&](absl::string_view run, size_t first) {
               if (bad.has_value()) return;
               if (std::optional<size_t> i = FindNonFinite(run, dtype)) {
                 bad = first + *i;
               }
             });
  if (!bad.has_value()) return absl::OkStatus();
  // Decode the offending element for the message.
  const size_t width = BytesPerElement(dtype);
  char element[4];
  size_t skipped = 0, copied = 0;
  for (absl::string_view piece : pieces) {
    for (char c : piece) {
      if (skipped < *bad * width) {
        ++skipped;
      } else if (copied < width) {
        element[copied++] = c;
      }
    }
  }
  std::vector<float> value(1);
  DecodeTensor(absl::string_view(element, width), dtype, absl::MakeSpan(value))
      .IgnoreError();
  return absl::InvalidArgumentError(
      absl::StrCat("element ", *bad, " is ", value[0], " (not finite)"));
}

void AccumulatePieces(absl::Span<const absl::string_view> pieces,
                      WireDType dtype, absl::Span<float> sum) {
  const size_t width = BytesPerElement(dtype);
  ForEachRun(pieces, width, [&](absl::string_view run, size_t first) {
    AccumulateTensor(run, dtype, sum.subspan(first, run.size() / width));
  });
}

namespace {

// A payload's whole elements in place, for splitting by element: an
// element split across pieces is assembled in `carried`, whose capacity
// (one per piece) keeps the pointers into it valid.
struct Run {
  const char* data;
  size_t elements;
  size_t first;  // Index of its first element in the payload.
};
using Carried = std::vector<std::array<char, 4>>;

std::vector<Run> Runs(absl::Span<const absl::string_view> pieces, size_t width,
                      Carried* carried) {
  std::vector<Run> runs;
  carried->reserve(pieces.size());
  ForEachRunOrCarried(
      pieces, width, [&](absl::string_view run, size_t first, bool is_carried) {
        const char* data = run.data();
        if (is_carried) {
          carried->emplace_back();
          std::memcpy(carried->back().data(), data, width);
          data = carried->back().data();
        }
        runs.push_back({data, run.size() / width, first});
      });
  return runs;
}

// Calls fn(data, n, first) for the parts of `runs` in elements [begin, end).
template <typename Fn>
void ForEachInRange(const std::vector<Run>& runs, size_t width, size_t begin,
                    size_t end, Fn fn) {
  auto it = std::upper_bound(
      runs.begin(), runs.end(), begin,
      [](size_t element, const Run& run) { return element < run.first; });
  if (it != runs.begin()) --it;
  for (; it != runs.end() && it->first < end; ++it) {
    const size_t from = std::max(begin, it->first);
    const size_t to = std::min(end, it->first + it->elements);
    if (from >= to) continue;
    fn(it->data + (from - it->first) * width, to - from, from);
  }
}

bool Parallel(WorkPool* pool, int64_t grain, size_t elements) {
  return pool != nullptr && pool->threads() > 1 && grain > 0 &&
         static_cast<int64_t>(elements) > grain;
}

// Calls fn(data, n, first) for every part of `runs` (which cover
// `elements`), split over `pool` in blocks of `grain` elements.
template <typename Fn>
void ForEachRunInParallel(WorkPool* pool, int64_t grain,
                          const std::vector<Run>& runs, size_t width,
                          size_t elements, Fn fn) {
  pool->ParallelFor(static_cast<int64_t>(elements), grain,
                    [&](int64_t begin, int64_t end) {
                      ForEachInRange(runs, width, begin, end, fn);
                    });
}

// sum op= the payload, where op is the decode (overwrite) or the sum.
void SumRuns(absl::Span<const absl::string_view> pieces, WireDType dtype,
             absl::Span<float> sum, bool overwrite, WorkPool* pool,
             int64_t grain, const std::vector<Run>* runs) {
  const kernels::Table& k = kernels::Active();
  const int index = KernelIndex(dtype);
  const size_t width = BytesPerElement(dtype);
  const auto op = overwrite ? k.decode[index] : k.accumulate[index];
  if (runs != nullptr) {
    ForEachRunInParallel(pool, grain, *runs, width, sum.size(),
                         [&](const char* p, size_t n, size_t first) {
                           op(p, n, sum.data() + first);
                         });
    return;
  }
  ForEachRun(pieces, width, [&](absl::string_view run, size_t first) {
    op(run.data(), run.size() / width, sum.data() + first);
  });
}

}  // namespace

absl::Status AccumulateCheckedPieces(absl::Span<const absl::string_view> pieces,
                                     WireDType dtype, absl::Span<float> sum,
                                     bool overwrite, WorkPool* pool,
                                     int64_t grain) {
  const kernels::Table& k = kernels::Active();
  const int index = KernelIndex(dtype);
  const size_t width = BytesPerElement(dtype);
  std::atomic<bool> bad{false};
  Carried carried;
  std::vector<Run> runs;
  const bool parallel = Parallel(pool, grain, sum.size());
  if (parallel) {
    runs = Runs(pieces, width, &carried);
    ForEachRunInParallel(pool, grain, runs, width, sum.size(),
                         [&](const char* p, size_t n, size_t) {
                           if (k.any_nonfinite[index](p, n)) bad = true;
                         });
  } else {
    ForEachRun(pieces, width, [&](absl::string_view run, size_t) {
      if (!bad && k.any_nonfinite[index](run.data(), run.size() / width)) {
        bad = true;
      }
    });
  }
  // Names the first bad element (a second, slow pass, on bad input only).
  if (bad) return CheckFinitePieces(pieces, dtype);
  SumRuns(pieces, dtype, sum, overwrite, pool, grain,
          parallel ? &runs : nullptr);
  return absl::OkStatus();
}

void AccumulateUncheckedPieces(absl::Span<const absl::string_view> pieces,
                               WireDType dtype, absl::Span<float> sum,
                               bool overwrite, WorkPool* pool, int64_t grain) {
  if (!Parallel(pool, grain, sum.size())) {
    SumRuns(pieces, dtype, sum, overwrite, pool, grain, nullptr);
    return;
  }
  Carried carried;
  const std::vector<Run> runs = Runs(pieces, BytesPerElement(dtype), &carried);
  SumRuns(pieces, dtype, sum, overwrite, pool, grain, &runs);
}

absl::Status DecodePieces(absl::Span<const absl::string_view> pieces,
                          WireDType dtype, absl::Span<float> out) {
  const size_t width = BytesPerElement(dtype);
  const size_t bytes = PiecesSize(pieces);
  if (bytes != out.size() * width) {
    return absl::InvalidArgumentError(
        absl::StrCat("payload has ", bytes, " bytes, expected ",
                     out.size() * width, " (", out.size(), " ",
                     WireDTypeName(dtype), " values)"));
  }
  ForEachRun(pieces, width, [&](absl::string_view run, size_t first) {
    DecodeTensor(run, dtype, out.subspan(first, run.size() / width))
        .IgnoreError();  // Sizes match by construction.
  });
  return absl::OkStatus();
}

}  // namespace lockstep
