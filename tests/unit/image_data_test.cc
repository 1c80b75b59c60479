#include "worker/data/image_data.h"

#include <cstdint>
#include <vector>

#include "gtest/gtest.h"

namespace lockstep {
namespace {

// Image k of a batch: pixel (h, w, c) = 1000 * k + 100 * h + 10 * w + c + 1,
// so every value says where it came from (and none is zero).
std::vector<float> Labeled(int count, const ImageSize& s) {
  std::vector<float> v(count * s.size());
  for (int k = 0; k < count; ++k)
    for (int h = 0; h < s.height; ++h)
      for (int w = 0; w < s.width; ++w)
        for (int c = 0; c < s.channels; ++c) {
          v[((k * s.height + h) * s.width + w) * s.channels + c] =
              1000.0f * k + 100.0f * h + 10.0f * w + c + 1;
        }
  return v;
}

TEST(SyntheticImagesTest, DeterministicAndLearnable) {
  const ImageSize size = {5, 4, 3};
  const Dataset a = MakeSyntheticImages(20, size, 4, 7);
  EXPECT_EQ(a.num_examples, 20);
  EXPECT_EQ(a.feature_dim, 60);
  EXPECT_EQ(a.num_classes, 4);
  ASSERT_EQ(a.features.size(), 20u * 60);
  for (int32_t y : a.labels) {
    EXPECT_GE(y, 0);
    EXPECT_LT(y, 4);
  }
  const Dataset b = MakeSyntheticImages(20, size, 4, 7);
  EXPECT_EQ(a.features, b.features);
  EXPECT_EQ(a.labels, b.labels);
  EXPECT_NE(MakeSyntheticImages(20, size, 4, 8).features, a.features);
  // Without noise every image is its class's template.
  const Dataset clean = MakeSyntheticImages(20, size, 4, 7, /*noise=*/0.0f);
  for (int i = 0; i < 20; ++i)
    for (int j = 0; j < 20; ++j) {
      if (clean.labels[i] != clean.labels[j]) continue;
      for (int p = 0; p < 60; ++p) {
        ASSERT_EQ(clean.features[i * 60 + p], clean.features[j * 60 + p]);
      }
    }
}

// A caller's bug stops with the precondition named (the same CheckOrDie as
// worker/data/dataset.cc's).
TEST(SyntheticImagesDeathTest, NoClassesStops) {
  EXPECT_DEATH(MakeSyntheticImages(4, {5, 4, 3}, 0, 7),
               "lockstep data: precondition failed: num_classes >= 1");
}

TEST(AugmentImagesTest, DisabledIsANoOp) {
  const ImageSize size = {4, 5, 2};
  std::vector<float> images = Labeled(3, size);
  const std::vector<float> before = images;
  AugmentImages({}, size, 1, 2, std::vector<int64_t>{4, 5, 6},
                absl::MakeSpan(images));
  EXPECT_EQ(images, before);
}

TEST(AugmentImagesTest, CropShiftsAndPadsWithZeros) {
  const ImageSize size = {6, 7, 2};
  ImageAugmentation aug;
  aug.random_crop = true;
  aug.crop_padding = 2;
  const std::vector<int64_t> ids = {10, 11, 12, 13, 14, 15, 16, 17};
  std::vector<float> images = Labeled(8, size);
  AugmentImages(aug, size, 3, 9, ids, absl::MakeSpan(images));
  int shifted = 0;
  for (int k = 0; k < 8; ++k) {
    // Find the shift from a pixel that still holds data: out(h, w) =
    // in(h + dy, w + dx) with |dy|, |dx| <= 2, zero outside.
    const float* out = images.data() + k * size.size();
    int dy = 99, dx = 99;
    for (int p = 0; p < size.height * size.width && dy == 99; ++p) {
      const float v = out[p * 2];
      if (v == 0) continue;
      const int src = static_cast<int>(v - 1000 * k - 1);
      dy = src / 100 - p / size.width;
      dx = (src / 10) % 10 - p % size.width;
    }
    ASSERT_LE(std::abs(dy), 2);
    ASSERT_LE(std::abs(dx), 2);
    shifted += dy != 0 || dx != 0;
    for (int h = 0; h < size.height; ++h)
      for (int w = 0; w < size.width; ++w)
        for (int c = 0; c < 2; ++c) {
          const int sh = h + dy, sw = w + dx;
          const bool inside =
              sh >= 0 && sh < size.height && sw >= 0 && sw < size.width;
          const float want =
              inside ? 1000.0f * k + 100.0f * sh + 10.0f * sw + c + 1 : 0.0f;
          EXPECT_EQ(out[(h * size.width + w) * 2 + c], want)
              << k << " " << h << " " << w;
        }
  }
  EXPECT_GT(shifted, 0);
}

TEST(AugmentImagesTest, FlipMirrorsAboutHalfTheImages) {
  const ImageSize size = {2, 5, 1};
  ImageAugmentation aug;
  aug.horizontal_flip = true;
  std::vector<int64_t> ids(64);
  for (int i = 0; i < 64; ++i) ids[i] = i;
  std::vector<float> images = Labeled(64, size);
  const std::vector<float> before = images;
  AugmentImages(aug, size, 5, 0, ids, absl::MakeSpan(images));
  int flipped = 0;
  for (int k = 0; k < 64; ++k) {
    const float* in = before.data() + k * 10;
    const float* out = images.data() + k * 10;
    const bool same = std::equal(in, in + 10, out);
    bool mirrored = true;
    for (int h = 0; h < 2; ++h)
      for (int w = 0; w < 5; ++w)
        mirrored &= out[h * 5 + w] == in[h * 5 + 4 - w];
    EXPECT_TRUE(same || mirrored) << k;
    flipped += mirrored ? 1 : 0;
  }
  EXPECT_GT(flipped, 16);
  EXPECT_LT(flipped, 48);
}

TEST(AugmentImagesTest, DrawsDependOnSeedStepAndExampleOnly) {
  const ImageSize size = {8, 8, 3};
  ImageAugmentation aug;
  aug.random_crop = true;
  aug.horizontal_flip = true;
  const std::vector<float> base = Labeled(4, size);
  auto run = [&](uint64_t seed, int64_t step, std::vector<int64_t> ids) {
    std::vector<float> images = base;
    AugmentImages(aug, size, seed, step, ids, absl::MakeSpan(images));
    return images;
  };
  const std::vector<float> a = run(1, 5, {30, 31, 32, 33});
  EXPECT_EQ(run(1, 5, {30, 31, 32, 33}), a);
  EXPECT_NE(run(1, 6, {30, 31, 32, 33}), a);
  EXPECT_NE(run(2, 5, {30, 31, 32, 33}), a);

  // Split across two "workers" (batches of 2) the same examples get the
  // same crops and flips: compare image by image, each relative to its own
  // input (the first two images of each half).
  const size_t n = size.size();
  std::vector<float> half(base.begin(), base.begin() + 2 * n);
  std::vector<float> first = half, second = half;
  AugmentImages(aug, size, 1, 5, std::vector<int64_t>{30, 31},
                absl::MakeSpan(first));
  AugmentImages(aug, size, 1, 5, std::vector<int64_t>{32, 33},
                absl::MakeSpan(second));
  std::vector<float> whole = half;
  whole.insert(whole.end(), half.begin(), half.end());
  AugmentImages(aug, size, 1, 5, std::vector<int64_t>{30, 31, 32, 33},
                absl::MakeSpan(whole));
  EXPECT_TRUE(std::equal(first.begin(), first.end(), whole.begin()));
  EXPECT_TRUE(std::equal(second.begin(), second.end(), whole.begin() + 2 * n));
}

}  // namespace
}  // namespace lockstep
