#include "common/wire_codec.h"

#include <cstdint>
#include <cstring>
#include <limits>
#include <string>
#include <vector>

#include "absl/status/status.h"
#include "absl/strings/str_cat.h"
#include "absl/types/span.h"
#include "gmock/gmock.h"
#include "gtest/gtest.h"

namespace lockstep {
namespace {

using ::testing::HasSubstr;

uint32_t Bits(float v) {
  uint32_t bits;
  std::memcpy(&bits, &v, sizeof(bits));
  return bits;
}

float FromBits(uint32_t bits) {
  float v;
  std::memcpy(&v, &bits, sizeof(v));
  return v;
}

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
          FromBits(0x00400001u),  // A denormal with more than one bit set.
          std::numeric_limits<float>::min(),
          kMax,
          kLowest,
          std::numeric_limits<float>::epsilon(),
          3.14159265f,
          kInf,
          -kInf,
          FromBits(0x7fc12345u)};  // Quiet NaN with payload.
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
    EXPECT_EQ(Bits(decoded[i]), Bits(original[i])) << "element " << i;
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
                           -kDenormMin, FromBits(0x00400001u),
                           std::numeric_limits<float>::min()})
                  .ok());
  // The largest finite bit patterns sit just below the Inf/NaN exponent.
  EXPECT_TRUE(CheckFinite({FromBits(0x7f7fffffu), FromBits(0xff7fffffu)}).ok());
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
    absl::Status status = CheckFinite({1.0f, FromBits(bits)});
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
