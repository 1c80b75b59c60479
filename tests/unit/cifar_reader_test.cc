#include "worker/data/cifar_reader.h"

#include <unistd.h>

#include <cstdint>
#include <cstdio>
#include <cstdlib>
#include <string>
#include <vector>

#include "absl/strings/str_cat.h"
#include "gmock/gmock.h"
#include "gtest/gtest.h"

namespace lockstep {
namespace {

using ::testing::HasSubstr;

// A record whose pixel for (plane c, row h, column w) is
// (label * 7 + c * 50 + h * 3 + w) % 256.
std::vector<uint8_t> Record(uint8_t label) {
  std::vector<uint8_t> r(kCifarRecordBytes);
  r[0] = label;
  for (int c = 0; c < 3; ++c)
    for (int h = 0; h < 32; ++h)
      for (int w = 0; w < 32; ++w) {
        r[1 + c * 1024 + h * 32 + w] =
            static_cast<uint8_t>((label * 7 + c * 50 + h * 3 + w) % 256);
      }
  return r;
}

float Normalized(int pixel, int c) {
  return (pixel / 255.0f - kCifarMean[c]) / kCifarStd[c];
}

class CifarReaderTest : public ::testing::Test {
 protected:
  void SetUp() override {
    char pattern[] = "/tmp/cifar_reader_test_XXXXXX";
    ASSERT_NE(mkdtemp(pattern), nullptr);
    dir_ = pattern;
  }
  void TearDown() override {
    for (const std::string& f : files_) std::remove(f.c_str());
    rmdir(dir_.c_str());
  }

  std::string Write(const std::string& name,
                    const std::vector<uint8_t>& bytes) {
    const std::string path = absl::StrCat(dir_, "/", name);
    std::FILE* f = std::fopen(path.c_str(), "wb");
    EXPECT_NE(f, nullptr);
    if (f == nullptr) return path;
    if (!bytes.empty()) std::fwrite(bytes.data(), 1, bytes.size(), f);
    std::fclose(f);
    files_.push_back(path);
    return path;
  }

  std::string WriteRecords(const std::string& name,
                           const std::vector<uint8_t>& labels) {
    std::vector<uint8_t> bytes;
    for (uint8_t label : labels) {
      const std::vector<uint8_t> r = Record(label);
      bytes.insert(bytes.end(), r.begin(), r.end());
    }
    return Write(name, bytes);
  }

  std::string dir_;
  std::vector<std::string> files_;
};

TEST_F(CifarReaderTest, ReadsRecordsAsNormalizedNhwc) {
  const std::string path = WriteRecords("test_batch.bin", {3, 9, 0});
  auto data = ReadCifarFile(path);
  ASSERT_TRUE(data.ok()) << data.status();
  EXPECT_EQ(data->num_examples, 3);
  EXPECT_EQ(data->feature_dim, 3072);
  EXPECT_EQ(data->num_classes, 10);
  EXPECT_EQ(data->labels, (std::vector<int32_t>{3, 9, 0}));
  ASSERT_EQ(data->features.size(), 3u * 3072);
  for (int n = 0; n < 3; ++n) {
    const int label = data->labels[n];
    for (int h : {0, 5, 31})
      for (int w : {0, 17, 31})
        for (int c = 0; c < 3; ++c) {
          const float got = data->features[n * 3072 + (h * 32 + w) * 3 + c];
          // The reader folds the division into one multiply-add.
          EXPECT_NEAR(
              got, Normalized((label * 7 + c * 50 + h * 3 + w) % 256, c), 1e-6)
              << n << " " << h << " " << w << " " << c;
        }
  }
  // The constants: pixel 0 and 255 of the red channel.
  EXPECT_NEAR(Normalized(0, 0), -0.4914 / 0.2470, 1e-5);
  EXPECT_NEAR(Normalized(255, 2), (1 - 0.4465) / 0.2616, 1e-5);
}

TEST_F(CifarReaderTest, LoadsTheSplitsInOrder) {
  for (int i = 1; i <= 5; ++i) {
    WriteRecords(absl::StrCat("data_batch_", i, ".bin"),
                 {static_cast<uint8_t>(i), static_cast<uint8_t>(i + 4)});
  }
  WriteRecords("test_batch.bin", {7});
  auto train = LoadCifar10(dir_, /*train=*/true);
  ASSERT_TRUE(train.ok()) << train.status();
  EXPECT_EQ(train->num_examples, 10);
  EXPECT_EQ(train->labels,
            (std::vector<int32_t>{1, 5, 2, 6, 3, 7, 4, 8, 5, 9}));
  EXPECT_EQ(train->features.size(), 10u * 3072);
  EXPECT_NEAR(train->features[9 * 3072], Normalized(9 * 7 % 256, 0), 1e-6);
  auto test = LoadCifar10(dir_, /*train=*/false);
  ASSERT_TRUE(test.ok()) << test.status();
  EXPECT_EQ(test->labels, (std::vector<int32_t>{7}));
}

TEST_F(CifarReaderTest, BadFilesAreNamed) {
  // Missing: data_batch_3.bin.
  WriteRecords("data_batch_1.bin", {1});
  WriteRecords("data_batch_2.bin", {1});
  auto missing = LoadCifar10(dir_, true);
  EXPECT_EQ(missing.status().code(), absl::StatusCode::kNotFound);
  EXPECT_THAT(missing.status().message(), HasSubstr("data_batch_3.bin"));

  std::vector<uint8_t> truncated = Record(4);
  truncated.pop_back();
  const std::string short_path = Write("short.bin", truncated);
  auto bad_size = ReadCifarFile(short_path);
  EXPECT_EQ(bad_size.status().code(), absl::StatusCode::kInvalidArgument);
  EXPECT_THAT(bad_size.status().message(), HasSubstr(short_path));
  EXPECT_THAT(bad_size.status().message(), HasSubstr("3072 bytes"));

  const std::string empty_path = Write("empty.bin", {});
  EXPECT_EQ(ReadCifarFile(empty_path).status().code(),
            absl::StatusCode::kInvalidArgument);

  const std::string label_path = WriteRecords("labels.bin", {2, 10, 1});
  auto bad_label = ReadCifarFile(label_path);
  EXPECT_EQ(bad_label.status().code(), absl::StatusCode::kInvalidArgument);
  EXPECT_THAT(bad_label.status().message(), HasSubstr(label_path));
  EXPECT_THAT(bad_label.status().message(), HasSubstr("record 1 has label 10"));

  EXPECT_EQ(LoadCifar10(dir_ + "/nowhere", false).status().code(),
            absl::StatusCode::kNotFound);

  // Past 2 GiB (a sparse file: nothing is written or read) is refused
  // before reading, not read until memory runs out.
  const std::string huge_path = Write("huge.bin", {});
  ASSERT_EQ(truncate(huge_path.c_str(), (int64_t{1} << 31) + 1), 0);
  auto huge = ReadCifarFile(huge_path);
  EXPECT_EQ(huge.status().code(), absl::StatusCode::kInvalidArgument);
  EXPECT_THAT(huge.status().message(), HasSubstr("larger than 2147483648"));
}

}  // namespace
}  // namespace lockstep
