#include "common/formats/safetensors.h"

#include <cstring>
#include <string>
#include <vector>

#include "gmock/gmock.h"
#include "gtest/gtest.h"

namespace lockstep {
namespace {

using ::testing::HasSubstr;

// The header length, then the header, as the format spells them.
std::string File(const std::string& header, const std::string& data) {
  std::string out(8, '\0');
  const uint64_t n = header.size();
  std::memcpy(&out[0], &n, 8);
  return out + header + data;
}

std::string Floats(std::vector<float> v) {
  return std::string(reinterpret_cast<const char*>(v.data()), v.size() * 4);
}

TEST(SafetensorsTest, EncodesTheHeaderAsTheFormatSpellsIt) {
  absl::StatusOr<std::string> bytes = EncodeSafetensors(
      {{"dense_0/kernel", {2, 1}}, {"b", {1}}}, std::vector<float>{1, 2, 3});
  ASSERT_TRUE(bytes.ok()) << bytes.status();
  const std::string header =
      "{\"dense_0/kernel\":{\"dtype\":\"F32\",\"shape\":[2,1],"
      "\"data_offsets\":[0,8]},\"b\":{\"dtype\":\"F32\",\"shape\":[1],"
      "\"data_offsets\":[8,12]}}";
  // Padded with spaces to 8-byte alignment of the data.
  const std::string padded =
      header + std::string((8 - header.size() % 8) % 8, ' ');
  EXPECT_EQ(*bytes, File(padded, Floats({1, 2, 3})));
}

TEST(SafetensorsTest, RoundTripsBitForBit) {
  const std::vector<float> values = {-0.0f, 1e-38f, 3.5f, -7.25f, 1e30f, 0.1f};
  absl::StatusOr<std::string> bytes =
      EncodeSafetensors({{"a", {2, 2}}, {"s", {}}, {"c", {1}}}, values);
  ASSERT_TRUE(bytes.ok()) << bytes.status();
  absl::StatusOr<std::vector<NamedTensor>> back = DecodeSafetensors(*bytes);
  ASSERT_TRUE(back.ok()) << back.status();
  ASSERT_EQ(back->size(), 3u);
  EXPECT_EQ((*back)[0].info.name, "a");
  EXPECT_EQ((*back)[0].info.shape, (std::vector<int64_t>{2, 2}));
  EXPECT_EQ((*back)[1].info.shape, std::vector<int64_t>{});  // A scalar.
  std::vector<float> flat;
  for (const NamedTensor& t : *back) {
    flat.insert(flat.end(), t.values.begin(), t.values.end());
  }
  ASSERT_EQ(flat.size(), values.size());
  EXPECT_EQ(std::memcmp(flat.data(), values.data(), values.size() * 4), 0);
}

TEST(SafetensorsTest, ReadsTensorsInDataOrderWhateverTheHeaderOrder) {
  const std::string bytes = File(
      "{\"__metadata__\":{\"format\":\"pt\"},"
      "\"z\":{\"dtype\":\"F32\",\"shape\":[1],\"data_offsets\":[4,8]},"
      "\"a\":{\"dtype\":\"F32\",\"shape\":[1],\"data_offsets\":[0,4]}}",
      Floats({1, 2}));
  absl::StatusOr<std::vector<NamedTensor>> back = DecodeSafetensors(bytes);
  ASSERT_TRUE(back.ok()) << back.status();
  ASSERT_EQ(back->size(), 2u);
  EXPECT_EQ((*back)[0].info.name, "a");
  EXPECT_EQ((*back)[0].values, std::vector<float>{1});
  EXPECT_EQ((*back)[1].values, std::vector<float>{2});
}

TEST(SafetensorsTest, AnEmptyTensorMayShareItsOffsetWithTheNext) {
  // Listed after the tensor that starts where it does.
  const std::string bytes = File(
      "{\"b\":{\"dtype\":\"F32\",\"shape\":[1],\"data_offsets\":[0,4]},"
      "\"empty\":{\"dtype\":\"F32\",\"shape\":[0],\"data_offsets\":[0,0]}}",
      Floats({7}));
  absl::StatusOr<std::vector<NamedTensor>> back = DecodeSafetensors(bytes);
  ASSERT_TRUE(back.ok()) << back.status();
  ASSERT_EQ(back->size(), 2u);
  EXPECT_EQ((*back)[0].info.name, "empty");
  EXPECT_EQ((*back)[1].values, std::vector<float>{7});
}

TEST(SafetensorsTest, RefusesWhatIsNotAWholeFloat32File) {
  const std::string ok_tensor =
      "\"a\":{\"dtype\":\"F32\",\"shape\":[2],\"data_offsets\":[0,8]}";
  struct Case {
    std::string bytes;
    std::string says;
  } cases[] = {
      {"1234", "too short"},
      {File("{" + ok_tensor + "}", Floats({1})), "cover 8 bytes"},
      {File("{" + ok_tensor + "}", Floats({1, 2, 3})), "holds 12"},
      {File("{\"a\":{\"dtype\":\"F16\",\"shape\":[2],\"data_offsets\":[0,4]}}",
            Floats({1})),
       "F16"},
      {File("{\"a\":{\"dtype\":\"F32\",\"shape\":[3],\"data_offsets\":[0,8]}}",
            Floats({1, 2})),
       "not 12"},
      {File("{" + ok_tensor +
                ",\"b\":{\"dtype\":\"F32\",\"shape\":[1],\"data_offsets\":[4,8]}}",
            Floats({1, 2})),
       "overlap or leave a gap"},
      {File("[1]", ""), "not an object"},
      {File("{\"a\":", ""), "INVALID_ARGUMENT"},
  };
  for (const Case& c : cases) {
    absl::StatusOr<std::vector<NamedTensor>> got = DecodeSafetensors(c.bytes);
    ASSERT_FALSE(got.ok()) << c.says;
    EXPECT_THAT(got.status().ToString(), HasSubstr(c.says));
  }
  // A header length past the limit is refused before anything is read.
  std::string huge(8, '\0');
  const uint64_t n = kMaxSafetensorsHeaderBytes + 1;
  std::memcpy(&huge[0], &n, 8);
  EXPECT_THAT(DecodeSafetensors(huge).status().message(),
              HasSubstr("over the limit"));
}

TEST(SafetensorsTest, EncodingRefusesMismatchesAndRepeatedNames) {
  EXPECT_FALSE(EncodeSafetensors({{"a", {2}}}, std::vector<float>{1}).ok());
  EXPECT_FALSE(
      EncodeSafetensors({{"a", {1}}, {"a", {1}}}, std::vector<float>{1, 2}).ok());
  EXPECT_FALSE(EncodeSafetensors({{"", {1}}}, std::vector<float>{1}).ok());
}

TEST(SafetensorsTest, FlattenByNameFillsTheModelsLayoutAndNamesWhatIsMissing) {
  std::vector<NamedTensor> file = {{{"b", {1}}, {5}},
                                   {{"a", {2}}, {1, 2}},
                                   {{"extra", {1}}, {9}}};
  absl::StatusOr<std::vector<float>> flat =
      FlattenByName({{"a", {2}}, {"b", {1}}}, file);
  ASSERT_TRUE(flat.ok()) << flat.status();
  EXPECT_EQ(*flat, (std::vector<float>{1, 2, 5}));
  absl::Status missing = FlattenByName({{"c", {1}}}, file).status();
  EXPECT_EQ(missing.code(), absl::StatusCode::kFailedPrecondition);
  EXPECT_THAT(missing.message(), HasSubstr("\"c\""));
  absl::Status shape = FlattenByName({{"a", {1, 2}}}, file).status();
  EXPECT_THAT(shape.message(), HasSubstr("[2] in the weights file, [1,2]"));
}

}  // namespace
}  // namespace lockstep
