#include "worker/data/dataset.h"

#include <stdlib.h>
#include <sys/stat.h>
#include <zlib.h>

#include <algorithm>
#include <cstdint>
#include <filesystem>
#include <fstream>
#include <set>
#include <string>
#include <vector>

#include "absl/status/status.h"
#include "gmock/gmock.h"
#include "gtest/gtest.h"

namespace lockstep {
namespace {

using ::testing::ElementsAre;
using ::testing::HasSubstr;

using Bytes = std::vector<uint8_t>;

Bytes Idx(const std::vector<uint32_t>& dims, const Bytes& body) {
  Bytes out = {0, 0, 0x08, static_cast<uint8_t>(dims.size())};
  for (uint32_t d : dims) {
    out.push_back(static_cast<uint8_t>(d >> 24));
    out.push_back(static_cast<uint8_t>(d >> 16));
    out.push_back(static_cast<uint8_t>(d >> 8));
    out.push_back(static_cast<uint8_t>(d));
  }
  out.insert(out.end(), body.begin(), body.end());
  return out;
}

// Three 2x2 images and their labels.
const Bytes kPixels = {0, 255, 51, 102, 1, 2, 3, 4, 200, 100, 50, 25};
const Bytes kLabels = {9, 0, 4};

class DatasetTest : public ::testing::Test {
 protected:
  void SetUp() override {
    std::string tmpl = ::testing::TempDir() + "/dataset_test.XXXXXX";
    ASSERT_NE(mkdtemp(tmpl.data()), nullptr);
    dir_ = tmpl;
  }

  void TearDown() override {
    std::error_code ignored;
    std::filesystem::remove_all(dir_, ignored);
  }

  std::string Write(const std::string& name, const Bytes& bytes) {
    const std::string path = dir_ + "/" + name;
    std::ofstream out(path, std::ios::binary);
    out.write(reinterpret_cast<const char*>(bytes.data()), bytes.size());
    EXPECT_TRUE(out.good()) << path;
    return path;
  }

  std::string WriteGz(const std::string& name, const Bytes& bytes) {
    const std::string path = dir_ + "/" + name + ".gz";
    gzFile f = gzopen(path.c_str(), "wb");
    EXPECT_NE(f, nullptr) << path;
    if (f == nullptr) return path;
    EXPECT_EQ(gzwrite(f, bytes.data(), bytes.size()),
              static_cast<int>(bytes.size()));
    EXPECT_EQ(gzclose(f), Z_OK);
    return path;
  }

  void ExpectError(const absl::StatusOr<Dataset>& result, absl::StatusCode code,
                   const std::string& file, const std::string& problem) {
    ASSERT_FALSE(result.ok());
    EXPECT_EQ(result.status().code(), code) << result.status();
    EXPECT_THAT(std::string(result.status().message()), HasSubstr(file));
    EXPECT_THAT(std::string(result.status().message()), HasSubstr(problem));
  }

  std::string dir_;
};

std::vector<float> Scaled(const Bytes& pixels) {
  std::vector<float> out;
  for (uint8_t p : pixels) out.push_back(static_cast<float>(p) / 255.0f);
  return out;
}

TEST_F(DatasetTest, LoadsPlainTrainSplit) {
  Write("train-images-idx3-ubyte", Idx({3, 2, 2}, kPixels));
  Write("train-labels-idx1-ubyte", Idx({3}, kLabels));
  absl::StatusOr<Dataset> data = LoadIdxDataset(dir_, /*train=*/true);
  ASSERT_TRUE(data.ok()) << data.status();
  EXPECT_EQ(data->num_examples, 3);
  EXPECT_EQ(data->feature_dim, 4);
  EXPECT_EQ(data->num_classes, 10);
  EXPECT_EQ(data->features, Scaled(kPixels));
  EXPECT_EQ(data->features[0], 0.0f);
  EXPECT_EQ(data->features[1], 1.0f);
  EXPECT_THAT(data->labels, ElementsAre(9, 0, 4));
}

TEST_F(DatasetTest, LoadsGzipTestSplit) {
  WriteGz("t10k-images-idx3-ubyte", Idx({3, 2, 2}, kPixels));
  WriteGz("t10k-labels-idx1-ubyte", Idx({3}, kLabels));
  absl::StatusOr<Dataset> data = LoadIdxDataset(dir_, /*train=*/false);
  ASSERT_TRUE(data.ok()) << data.status();
  EXPECT_EQ(data->num_examples, 3);
  EXPECT_EQ(data->feature_dim, 4);
  EXPECT_EQ(data->features, Scaled(kPixels));
  EXPECT_THAT(data->labels, ElementsAre(9, 0, 4));
}

TEST_F(DatasetTest, PrefersThePlainFileOverGzip) {
  Write("train-images-idx3-ubyte", Idx({1, 1, 2}, {10, 20}));
  WriteGz("train-images-idx3-ubyte", Idx({1, 1, 2}, {30, 40}));
  WriteGz("train-labels-idx1-ubyte", Idx({1}, {5}));
  absl::StatusOr<Dataset> data = LoadIdxDataset(dir_, /*train=*/true);
  ASSERT_TRUE(data.ok()) << data.status();
  EXPECT_EQ(data->features, Scaled({10, 20}));
  EXPECT_THAT(data->labels, ElementsAre(5));
}

TEST_F(DatasetTest, MissingFilesAreNotFound) {
  ExpectError(LoadIdxDataset(dir_, /*train=*/true), absl::StatusCode::kNotFound,
              "train-images-idx3-ubyte", dir_);
  Write("t10k-images-idx3-ubyte", Idx({3, 2, 2}, kPixels));
  ExpectError(LoadIdxDataset(dir_, /*train=*/false),
              absl::StatusCode::kNotFound, "t10k-labels-idx1-ubyte.gz", dir_);
}

TEST_F(DatasetTest, LabelOutOfRangeIsInvalid) {
  Write("train-images-idx3-ubyte", Idx({3, 2, 2}, kPixels));
  const std::string labels =
      Write("train-labels-idx1-ubyte", Idx({3}, {1, 10, 2}));
  ExpectError(LoadIdxDataset(dir_, /*train=*/true),
              absl::StatusCode::kInvalidArgument, labels, "label 10");
}

TEST_F(DatasetTest, CountMismatchIsInvalid) {
  const std::string images =
      Write("train-images-idx3-ubyte", Idx({3, 2, 2}, kPixels));
  const std::string labels = Write("train-labels-idx1-ubyte", Idx({2}, {1, 2}));
  absl::StatusOr<Dataset> data = LoadIdxDataset(dir_, /*train=*/true);
  ExpectError(data, absl::StatusCode::kInvalidArgument, images, "3 images");
  ExpectError(data, absl::StatusCode::kInvalidArgument, labels, "2 labels");
}

TEST_F(DatasetTest, WrongShapesAreInvalid) {
  const std::string images =
      Write("train-images-idx3-ubyte", Idx({3, 4}, kPixels));
  Write("train-labels-idx1-ubyte", Idx({3}, kLabels));
  ExpectError(LoadIdxDataset(dir_, /*train=*/true),
              absl::StatusCode::kInvalidArgument, images, "3 dimensions");

  Write("t10k-images-idx3-ubyte", Idx({3, 2, 2}, kPixels));
  const std::string labels =
      Write("t10k-labels-idx1-ubyte", Idx({3, 1}, kLabels));
  ExpectError(LoadIdxDataset(dir_, /*train=*/false),
              absl::StatusCode::kInvalidArgument, labels, "1 dimension");
}

TEST_F(DatasetTest, MalformedFileErrorNamesTheGzipFile) {
  Bytes images = Idx({3, 2, 2}, kPixels);
  images.pop_back();
  const std::string path = WriteGz("train-images-idx3-ubyte", images);
  WriteGz("train-labels-idx1-ubyte", Idx({3}, kLabels));
  ExpectError(LoadIdxDataset(dir_, /*train=*/true),
              absl::StatusCode::kInvalidArgument, path, "truncated body");
}

TEST(SyntheticDatasetTest, ShapesAndRanges) {
  const Dataset data = MakeSyntheticDataset(500, 7, 3, 42);
  EXPECT_EQ(data.num_examples, 500);
  EXPECT_EQ(data.feature_dim, 7);
  EXPECT_EQ(data.num_classes, 3);
  ASSERT_EQ(data.features.size(), 500u * 7);
  ASSERT_EQ(data.labels.size(), 500u);
  for (float x : data.features) {
    EXPECT_GE(x, -1.0f);
    EXPECT_LT(x, 1.0f);
  }
  std::set<int32_t> seen(data.labels.begin(), data.labels.end());
  EXPECT_THAT(seen, ElementsAre(0, 1, 2));
  // Not degenerate: values spread over the whole interval.
  const auto [lo, hi] =
      std::minmax_element(data.features.begin(), data.features.end());
  EXPECT_LT(*lo, -0.95f);
  EXPECT_GT(*hi, 0.95f);
}

TEST(SyntheticDatasetTest, DeterministicInSeed) {
  const Dataset a = MakeSyntheticDataset(100, 5, 4, 7);
  const Dataset b = MakeSyntheticDataset(100, 5, 4, 7);
  const Dataset c = MakeSyntheticDataset(100, 5, 4, 8);
  EXPECT_EQ(a.features, b.features);
  EXPECT_EQ(a.labels, b.labels);
  EXPECT_NE(a.features, c.features);
  EXPECT_NE(a.labels, c.labels);
}

TEST(SyntheticDatasetTest, EmptyIsAllowed) {
  const Dataset data = MakeSyntheticDataset(0, 5, 2, 1);
  EXPECT_EQ(data.num_examples, 0);
  EXPECT_TRUE(data.features.empty());
  EXPECT_TRUE(data.labels.empty());
}

TEST(GatherBatchTest, CopiesRequestedRowsInOrder) {
  Dataset data;
  data.num_examples = 4;
  data.feature_dim = 3;
  data.num_classes = 5;
  data.features = {0, 1, 2, 10, 11, 12, 20, 21, 22, 30, 31, 32};
  data.labels = {4, 3, 2, 1};
  const std::vector<int64_t> indices = {3, 0, 3, 2};
  std::vector<float> features(indices.size() * 3, -1.0f);
  std::vector<int32_t> labels(indices.size(), -1);
  GatherBatch(data, indices, absl::MakeSpan(features), absl::MakeSpan(labels));
  EXPECT_THAT(features,
              ElementsAre(30, 31, 32, 0, 1, 2, 30, 31, 32, 20, 21, 22));
  EXPECT_THAT(labels, ElementsAre(1, 4, 1, 2));
}

TEST(GatherBatchTest, EmptyBatchTouchesNothing) {
  const Dataset data = MakeSyntheticDataset(3, 2, 2, 1);
  GatherBatch(data, {}, absl::Span<float>(), absl::Span<int32_t>());
}

// A caller's bug, not bad data: it stops, naming the precondition
// (worker/data/check_or_die.h), rather than read past the data set.
TEST(GatherBatchDeathTest, IndexPastTheDataSetStops) {
  const Dataset data = MakeSyntheticDataset(3, 2, 2, 1);
  const std::vector<int64_t> indices = {3};
  std::vector<float> features(2);
  std::vector<int32_t> labels(1);
  EXPECT_DEATH(GatherBatch(data, indices, absl::MakeSpan(features),
                           absl::MakeSpan(labels)),
               "lockstep data: precondition failed: 0 <= index < "
               "num_examples");
}

// The real data set, when the Debian package dataset-fashion-mnist is
// installed; it exercises the gzip path on the files we train on.
constexpr char kFashionMnistDir[] = "/usr/share/datasets/fashion-mnist";

TEST(FashionMnistTest, LoadsBothSplits) {
  struct stat st;
  if (stat(kFashionMnistDir, &st) != 0) {
    GTEST_SKIP() << kFashionMnistDir
                 << " is absent (install dataset-fashion-mnist)";
  }
  for (bool train : {true, false}) {
    absl::StatusOr<Dataset> data = LoadIdxDataset(kFashionMnistDir, train);
    ASSERT_TRUE(data.ok()) << data.status();
    EXPECT_EQ(data->num_examples, train ? 60000 : 10000);
    EXPECT_EQ(data->feature_dim, 784);
    EXPECT_EQ(data->num_classes, 10);
    ASSERT_EQ(data->features.size(),
              static_cast<size_t>(data->num_examples) * 784);
    ASSERT_EQ(data->labels.size(), static_cast<size_t>(data->num_examples));
    std::vector<int64_t> per_class(10, 0);
    for (int32_t y : data->labels) {
      ASSERT_GE(y, 0);
      ASSERT_LT(y, 10);
      ++per_class[y];
    }
    // Fashion-MNIST is balanced: 6000 / 1000 examples of each class.
    for (int64_t count : per_class) EXPECT_EQ(count, train ? 6000 : 1000);
    const auto [lo, hi] =
        std::minmax_element(data->features.begin(), data->features.end());
    EXPECT_EQ(*lo, 0.0f);
    EXPECT_EQ(*hi, 1.0f);
  }
}

}  // namespace
}  // namespace lockstep
