#include "common/wire/wire_codec.h"

#include <cstdint>
#include <cstring>
#include <limits>
#include <string>
#include <vector>

#include "absl/base/casts.h"
#include "absl/status/status.h"
#include "absl/strings/str_cat.h"
#include "absl/types/span.h"
#include "gmock/gmock.h"
#include "gtest/gtest.h"

namespace lockstep {
namespace {

using ::testing::HasSubstr;

constexpr float kMax = std::numeric_limits<float>::max();
constexpr float kLowest = std::numeric_limits<float>::lowest();
constexpr float kDenormMin = std::numeric_limits<float>::denorm_min();
constexpr float kInf = std::numeric_limits<float>::infinity();
const float kNaN = std::numeric_limits<float>::quiet_NaN();

// Values whose bits are easy to get wrong: signed zeros, the smallest and a
// mid-range denormal, the normal limits, and a NaN with a payload.
std::vector<float> EdgeValues() {
  return {0.0f,
          -0.0f,
          1.0f,
          -1.0f,
          kDenormMin,
          -kDenormMin,
          absl::bit_cast<float>(
              0x00400001u),  // A denormal with more than one bit set.
          std::numeric_limits<float>::min(),
          kMax,
          kLowest,
          std::numeric_limits<float>::epsilon(),
          3.14159265f,
          kInf,
          -kInf,
          absl::bit_cast<float>(0x7fc12345u)};  // Quiet NaN with payload.
}

TEST(WireCodecTest, EncodeLaysOutLittleEndianFloat32) {
  std::string bytes;
  EncodeFloat32({1.0f, -0.0f, kDenormMin}, &bytes);
  const std::string expected("\x00\x00\x80\x3f"   // 1.0f = 0x3f800000
                             "\x00\x00\x00\x80"   // -0.0f = 0x80000000
                             "\x01\x00\x00\x00",  // denorm_min = 0x00000001
                             12);
  EXPECT_EQ(bytes, expected);
}

TEST(WireCodecTest, RoundTripIsBitExact) {
  const std::vector<float> original = EdgeValues();
  std::string bytes;
  EncodeFloat32(original, &bytes);
  ASSERT_EQ(bytes.size(), original.size() * sizeof(float));

  // Start from a sentinel so an element left unwritten shows.
  std::vector<float> decoded(original.size(), 42.0f);
  absl::Status status = DecodeFloat32(bytes, absl::MakeSpan(decoded));
  ASSERT_TRUE(status.ok()) << status;
  for (size_t i = 0; i < original.size(); ++i) {
    EXPECT_EQ(absl::bit_cast<uint32_t>(decoded[i]),
              absl::bit_cast<uint32_t>(original[i]))
        << "element " << i;
  }
}

TEST(WireCodecTest, EncodeReplacesPreviousContents) {
  std::string bytes = "previous contents that are longer";
  EncodeFloat32({2.0f}, &bytes);
  EXPECT_EQ(bytes, std::string("\x00\x00\x00\x40", 4));
  EncodeFloat32({}, &bytes);
  EXPECT_TRUE(bytes.empty());
}

TEST(WireCodecTest, EmptyRoundTrip) {
  std::string bytes = "x";
  EncodeFloat32(absl::Span<const float>(), &bytes);
  EXPECT_EQ(bytes, "");
  EXPECT_TRUE(DecodeFloat32("", absl::Span<float>()).ok());
}

TEST(WireCodecTest, DecodeRejectsSizeMismatch) {
  struct Case {
    size_t bytes;
    size_t floats;
    const char* message;
  };
  for (const Case& c : std::vector<Case>{
           {7, 2, "payload has 7 bytes, expected 8 (2 float32 values)"},
           {12, 2, "payload has 12 bytes, expected 8 (2 float32 values)"},
           {0, 3, "payload has 0 bytes, expected 12 (3 float32 values)"},
           {4, 0, "payload has 4 bytes, expected 0 (0 float32 values)"}}) {
    const std::string payload(c.bytes, '\x01');
    std::vector<float> out(c.floats, 0.0f);
    absl::Status status = DecodeFloat32(payload, absl::MakeSpan(out));
    EXPECT_EQ(status.code(), absl::StatusCode::kInvalidArgument) << c.message;
    EXPECT_EQ(status.message(), c.message);
  }
}

TEST(WireCodecTest, CheckFiniteAcceptsFiniteValues) {
  EXPECT_TRUE(CheckFinite({}).ok());
  EXPECT_TRUE(CheckFinite({0.0f, -0.0f, 1.0f, kMax, kLowest, kDenormMin,
                           -kDenormMin, absl::bit_cast<float>(0x00400001u),
                           std::numeric_limits<float>::min()})
                  .ok());
  // The largest finite bit patterns sit just below the Inf/NaN exponent.
  EXPECT_TRUE(CheckFinite({absl::bit_cast<float>(0x7f7fffffu),
                           absl::bit_cast<float>(0xff7fffffu)})
                  .ok());
}

TEST(WireCodecTest, CheckFiniteNamesTheBadElement) {
  struct Bad {
    float value;
    const char* text;
  };
  const Bad bads[] = {{kNaN, "nan"}, {kInf, "inf"}, {-kInf, "-inf"}};
  constexpr size_t kSize = 7;
  for (const Bad& bad : bads) {
    for (size_t position : {size_t{0}, size_t{3}, kSize - 1}) {
      std::vector<float> values = {1.0f, -2.0f, kMax, kDenormMin,
                                   0.0f, 5.5f,  kLowest};
      ASSERT_EQ(values.size(), kSize);
      values[position] = bad.value;
      absl::Status status = CheckFinite(values);
      EXPECT_EQ(status.code(), absl::StatusCode::kInvalidArgument)
          << bad.text << " at " << position;
      EXPECT_THAT(status.message(),
                  HasSubstr(absl::StrCat("element ", position, " is ",
                                         bad.text)))
          << status;
    }
  }
}

TEST(WireCodecTest, CheckFiniteRejectsEveryNaNAndInfBitPattern) {
  // Any sign, any payload: exponent all ones is never finite.
  for (uint32_t bits : {0x7f800000u, 0xff800000u, 0x7fc00000u, 0xffc00000u,
                        0x7f800001u, 0x7fffffffu, 0xffffffffu}) {
    absl::Status status = CheckFinite({1.0f, absl::bit_cast<float>(bits)});
    EXPECT_EQ(status.code(), absl::StatusCode::kInvalidArgument)
        << std::hex << bits;
    EXPECT_THAT(status.message(), HasSubstr("element 1 ")) << std::hex << bits;
  }
}

TEST(WireCodecTest, CheckFiniteNamesTheFirstOfSeveral) {
  std::vector<float> values(1000, 0.5f);
  values[617] = -kInf;
  values[618] = kNaN;
  values[999] = kInf;
  absl::Status status = CheckFinite(values);
  EXPECT_EQ(status.code(), absl::StatusCode::kInvalidArgument);
  EXPECT_THAT(status.message(), HasSubstr("element 617 is -inf"));

  std::vector<float> last_only(1000, 0.5f);
  last_only[999] = kNaN;
  EXPECT_THAT(CheckFinite(last_only).message(), HasSubstr("element 999 is nan"));
}

}  // namespace
}  // namespace lockstep

namespace lockstep {
namespace {

uint16_t Bits16(const std::string& bytes, size_t i) {
  uint16_t h;
  std::memcpy(&h, bytes.data() + 2 * i, sizeof(h));
  return h;
}

TEST(WireDTypeTest, Bfloat16RoundsToNearestEven) {
  // 1 + 2^-8 lies halfway between bf16 neighbours 1 and 1 + 2^-7: ties go to
  // the even one (1.0); 1 + 3 * 2^-8 ties up to 1 + 2^-6's neighbour.
  const std::vector<float> values = {1.0f, 1.0f + 0x1p-8f, 1.0f + 0x3p-8f,
                                     -2.5f, 0.0f, 1.0f + 0x1p-7f};
  std::string bytes;
  EncodeTensor(values, WireDType::kBfloat16, &bytes);
  ASSERT_EQ(bytes.size(), values.size() * 2);
  EXPECT_EQ(Bits16(bytes, 0), 0x3f80);
  EXPECT_EQ(Bits16(bytes, 1), 0x3f80);
  EXPECT_EQ(Bits16(bytes, 2), 0x3f82);
  EXPECT_EQ(Bits16(bytes, 3), 0xc020);
  EXPECT_EQ(Bits16(bytes, 4), 0x0000);
  EXPECT_EQ(Bits16(bytes, 5), 0x3f81);
  std::vector<float> back(values.size());
  ASSERT_TRUE(DecodeTensor(bytes, WireDType::kBfloat16, absl::MakeSpan(back)).ok());
  EXPECT_EQ(back, (std::vector<float>{1.0f, 1.0f, 1.0f + 0x1p-6f, -2.5f, 0.0f,
                                      1.0f + 0x1p-7f}));
}

TEST(WireDTypeTest, Float16KnownValues) {
  const std::vector<float> values = {1.0f, -2.0f, 65504.0f, 0x1p-24f, 0.1f};
  std::string bytes;
  EncodeTensor(values, WireDType::kFloat16, &bytes);
  EXPECT_EQ(Bits16(bytes, 0), 0x3c00);
  EXPECT_EQ(Bits16(bytes, 1), 0xc000);
  EXPECT_EQ(Bits16(bytes, 2), 0x7bff);  // Largest finite half.
  EXPECT_EQ(Bits16(bytes, 3), 0x0001);  // Smallest subnormal.
  EXPECT_EQ(Bits16(bytes, 4), 0x2e66);  // 0.1 rounded to nearest.
  std::vector<float> back(values.size());
  ASSERT_TRUE(DecodeTensor(bytes, WireDType::kFloat16, absl::MakeSpan(back)).ok());
  EXPECT_EQ(back[2], 65504.0f);
  EXPECT_EQ(back[3], 0x1p-24f);
  EXPECT_NEAR(back[4], 0.1f, 1e-4);
}

TEST(WireDTypeTest, AccumulateAddsDecodedValuesAndChecksFinite) {
  const std::vector<float> values = {1.5f, -0.25f, 3.0f};
  for (WireDType dtype :
       {WireDType::kFloat32, WireDType::kBfloat16, WireDType::kFloat16}) {
    std::string bytes;
    EncodeTensor(values, dtype, &bytes);
    EXPECT_EQ(bytes.size(), values.size() * BytesPerElement(dtype));
    std::vector<float> sum = {1.0f, 1.0f, 1.0f};
    AccumulateTensor(bytes, dtype, absl::MakeSpan(sum));
    EXPECT_EQ(sum, (std::vector<float>{2.5f, 0.75f, 4.0f}));
    EXPECT_TRUE(CheckFiniteEncoded(bytes, dtype).ok());
    std::vector<float> bad = values;
    bad[1] = std::numeric_limits<float>::infinity();
    EncodeTensor(bad, dtype, &bytes);
    absl::Status s = CheckFiniteEncoded(bytes, dtype);
    EXPECT_EQ(s.code(), absl::StatusCode::kInvalidArgument);
    EXPECT_NE(std::string(s.message()).find("element 1"), std::string::npos);
    std::vector<float> out(2);
    EXPECT_EQ(DecodeTensor(bytes, dtype, absl::MakeSpan(out)).code(),
              absl::StatusCode::kInvalidArgument);
  }
  // fp16 overflows to Inf past 65504: caught as not finite.
  std::string bytes;
  EncodeTensor(std::vector<float>{1e6f}, WireDType::kFloat16, &bytes);
  EXPECT_FALSE(CheckFiniteEncoded(bytes, WireDType::kFloat16).ok());
}

// Every half round-trips, and encoding agrees with the compiler's own IEEE
// conversion (_Float16) on random floats of every magnitude.
TEST(WireDTypeTest, Float16MatchesIeeeConversion) {
  for (uint32_t h = 0; h < 0x10000; ++h) {
    if ((h & 0x7c00) == 0x7c00 && (h & 0x3ff) != 0) continue;  // NaNs.
    const uint16_t bits = static_cast<uint16_t>(h);
    std::string bytes(reinterpret_cast<const char*>(&bits), 2);
    std::vector<float> f(1);
    ASSERT_TRUE(DecodeTensor(bytes, WireDType::kFloat16, absl::MakeSpan(f)).ok());
    _Float16 reference;
    std::memcpy(&reference, &bits, 2);
    ASSERT_EQ(f[0], static_cast<float>(reference)) << h;
    std::string again;
    EncodeTensor(f, WireDType::kFloat16, &again);
    ASSERT_EQ(Bits16(again, 0), bits) << h;
  }
  uint64_t state = 12345;
  for (int i = 0; i < 200000; ++i) {
    state = state * 6364136223846793005ull + 1442695040888963407ull;
    uint32_t u = static_cast<uint32_t>(state >> 32);
    // Exponents around the half range: 2^-30 .. 2^17.
    u = (u & 0x807fffffu) | ((97u + (u >> 23) % 48u) << 23);
    float f;
    std::memcpy(&f, &u, 4);
    std::string bytes;
    EncodeTensor(std::vector<float>{f}, WireDType::kFloat16, &bytes);
    const _Float16 reference = static_cast<_Float16>(f);
    uint16_t expected;
    std::memcpy(&expected, &reference, 2);
    ASSERT_EQ(Bits16(bytes, 0), expected) << f;
  }
}

// Pieces cut at every offset, elements straddling the cut included, give
// the same sums and the same first bad element as the whole payload.
TEST(WireDTypeTest, PiecesMatchTheWholePayload) {
  std::vector<float> values(37);
  for (size_t i = 0; i < values.size(); ++i) values[i] = 0.5f * i - 7.25f;
  for (WireDType dtype :
       {WireDType::kFloat32, WireDType::kBfloat16, WireDType::kFloat16}) {
    std::string bytes;
    EncodeTensor(values, dtype, &bytes);
    std::vector<float> whole(values.size(), 1.0f);
    AccumulateTensor(bytes, dtype, absl::MakeSpan(whole));
    for (size_t a = 0; a <= bytes.size(); ++a) {
      for (size_t b = a; b <= bytes.size(); b += 3) {
        const absl::string_view all(bytes);
        const std::vector<absl::string_view> pieces = {
            all.substr(0, a), all.substr(a, b - a), all.substr(b)};
        ASSERT_EQ(PiecesSize(pieces), bytes.size());
        std::vector<float> sum(values.size(), 1.0f);
        AccumulatePieces(pieces, dtype, absl::MakeSpan(sum));
        ASSERT_EQ(sum, whole) << a << " " << b;
        ASSERT_TRUE(CheckFinitePieces(pieces, dtype).ok());
      }
    }
    std::vector<float> bad = values;
    bad[17] = std::numeric_limits<float>::quiet_NaN();
    EncodeTensor(bad, dtype, &bytes);
    const absl::string_view all(bytes);
    const size_t cut = 17 * BytesPerElement(dtype) + 1;  // Splits element 17.
    absl::Status s = CheckFinitePieces({all.substr(0, cut), all.substr(cut)},
                                       dtype);
    EXPECT_EQ(s.code(), absl::StatusCode::kInvalidArgument);
    EXPECT_EQ(s.message(), "element 17 is nan (not finite)");
  }
}

TEST(WireDTypeTest, ParsesNames) {
  EXPECT_EQ(*ParseWireDType("bf16"), WireDType::kBfloat16);
  EXPECT_EQ(*ParseWireDType("fp16"), WireDType::kFloat16);
  EXPECT_EQ(*ParseWireDType("fp32"), WireDType::kFloat32);
  EXPECT_FALSE(ParseWireDType("int8").ok());
  EXPECT_STREQ(WireDTypeName(WireDType::kBfloat16), "bf16");
}

}  // namespace
}  // namespace lockstep
