// The CPU device's direct convolution kernels (worker/device/cpu/cpu_conv.h)
// against a double-precision convolution written from the definition: forward, input
// gradient and kernel gradient over geometries that reach every tile size,
// channel counts that do and do not fill whole vectors, strides, padding on
// every side and windows wider than the image.
#include "worker/device/cpu/cpu_conv.h"

#include <algorithm>
#include <cmath>
#include <cstdint>
#include <string>
#include <vector>

#include "gtest/gtest.h"
#include "tests/unit/cpu_conv_test_util.h"
#include "tests/unit/random_floats.h"
#include "worker/device/cpu/cpu_conv_runner.h"
#include "worker/device/image_geometry.h"

namespace lockstep {
namespace {

using cpu_ops::ConvScratch;

std::vector<Case> Cases() {
  return {
      // ResNet-20's convolutions, batch 2.
      {2, 32, 32, 3, 3, 3, 1, 1, 1, 1, 1, 1, 16},
      {2, 32, 32, 16, 3, 3, 1, 1, 1, 1, 1, 1, 16},
      {2, 32, 32, 16, 3, 3, 2, 2, 0, 0, 1, 1, 32},
      {2, 16, 16, 32, 3, 3, 1, 1, 1, 1, 1, 1, 32},
      {2, 16, 16, 32, 1, 1, 2, 2, 0, 0, 0, 0, 64},
      {2, 8, 8, 64, 3, 3, 1, 1, 1, 1, 1, 1, 64},
      // ResNet-50's stem (7x7, stride 2, after its 3-pixel zero padding) and
      // a wide 3x3 (two blocks of four vectors of filters).
      {1, 38, 38, 3, 7, 7, 2, 2, 0, 0, 0, 0, 64},
      {1, 4, 4, 128, 3, 3, 1, 1, 1, 1, 1, 1, 128},
      // Filter and channel counts that leave part of a vector (1 to 4
      // vectors with a tail), and output widths that split into uneven
      // tiles.
      {3, 5, 17, 5, 3, 3, 1, 1, 1, 1, 1, 1, 7},
      {1, 6, 13, 17, 3, 2, 1, 1, 1, 0, 1, 1, 33},
      {2, 7, 11, 33, 2, 3, 2, 1, 0, 2, 1, 0, 49},
      {1, 5, 9, 50, 3, 3, 1, 2, 2, 1, 2, 1, 61},
      {1, 3, 23, 1, 1, 5, 1, 1, 0, 2, 0, 2, 1},
      {2, 4, 29, 2, 3, 3, 1, 1, 1, 1, 1, 1, 3},
      // Strides larger than the window (pixels no window reads), windows
      // wider than the image, and a 1x1 window with padding.
      {2, 9, 10, 4, 2, 2, 3, 3, 0, 0, 0, 0, 20},
      {1, 2, 3, 6, 5, 5, 1, 1, 2, 2, 2, 2, 18},
      {1, 6, 6, 16, 1, 1, 1, 1, 1, 1, 1, 1, 16},
      // Output maps narrower than 4 pixels, which get batch tiles (one pixel
      // of up to 16 images, the taps in the padding skipped): ResNet-50's
      // 2x2 and 1x1 maps, more than 16 images, more than 4 vectors of
      // filters, a 1x1 stride-2 kernel and a map 1 pixel wide.
      {3, 2, 2, 40, 3, 3, 1, 1, 1, 1, 1, 1, 70},
      {17, 1, 1, 20, 3, 3, 1, 1, 1, 1, 1, 1, 33},
      {5, 4, 4, 24, 1, 1, 2, 2, 0, 0, 0, 0, 130},
      {2, 3, 1, 5, 2, 2, 1, 1, 0, 0, 1, 1, 9},
      // Valid padding that leaves the last rows and columns unread.
      {2, 8, 9, 8, 3, 3, 2, 2, 0, 0, 0, 0, 16},
  };
}

// Calls visit(x_index, kernel_index, y_index) for every product of the
// convolution, reading the definition straight.
template <typename Visit>
void ForEachProduct(const WindowGeometry& g, int filters, Visit visit) {
  const NhwcShape& s = g.input;
  for (int n = 0; n < s.batch; ++n) {
    for (int oh = 0; oh < g.out_height; ++oh) {
      for (int ow = 0; ow < g.out_width; ++ow) {
        for (int i = 0; i < g.window_height; ++i) {
          const int h = oh * g.stride_height - g.pad_top + i;
          if (h < 0 || h >= s.height) continue;
          for (int j = 0; j < g.window_width; ++j) {
            const int w = ow * g.stride_width - g.pad_left + j;
            if (w < 0 || w >= s.width) continue;
            for (int c = 0; c < s.channels; ++c) {
              const int64_t x =
                  ((int64_t{n} * s.height + h) * s.width + w) * s.channels + c;
              const int64_t k =
                  ((int64_t{i} * g.window_width + j) * s.channels + c) *
                  filters;
              const int64_t y =
                  ((int64_t{n} * g.out_height + oh) * g.out_width + ow) *
                  filters;
              for (int f = 0; f < filters; ++f) visit(x, k + f, y + f);
            }
          }
        }
      }
    }
  }
}

// Each result within float rounding of the double reference: 1e-5 of the
// sum of its terms' magnitudes (a few ulps per term at these lengths).
void ExpectNear(const std::vector<float>& got, const std::vector<double>& want,
                const std::vector<double>& magnitude, const std::string& what) {
  ASSERT_EQ(got.size(), want.size()) << what;
  int bad = 0;
  for (size_t i = 0; i < got.size() && bad < 5; ++i) {
    const double tolerance = 1e-5 * magnitude[i] + 1e-30;
    if (!(std::abs(got[i] - want[i]) <= tolerance)) {
      ADD_FAILURE() << what << " [" << i << "]: got " << got[i] << ", want "
                    << want[i] << " (tolerance " << tolerance << ")";
      ++bad;
    }
  }
}

TEST_F(DirectConvTest, MatchesTheDefinition) {
  uint64_t seed = 1;
  for (const Case& c : Cases()) {
    SCOPED_TRACE(c.Name());
    const WindowGeometry g = c.Window();
    const int64_t x_size = g.input.Size();
    const int64_t k_size = g.PatchSize() * c.filters;
    const int64_t y_size = g.OutputPixels() * c.filters;
    ASSERT_GT(y_size, 0);
    const std::vector<float> x = RandomFloats(x_size, ++seed);
    const std::vector<float> kernel = RandomFloats(k_size, ++seed);
    const std::vector<float> dy = RandomFloats(y_size, ++seed);

    std::vector<double> y_want(y_size), dx_want(x_size), dk_want(k_size);
    std::vector<double> y_mag(y_size), dx_mag(x_size), dk_mag(k_size);
    ForEachProduct(g, c.filters, [&](int64_t xi, int64_t ki, int64_t yi) {
      y_want[yi] += double{x[xi]} * kernel[ki];
      y_mag[yi] += std::abs(double{x[xi]} * kernel[ki]);
      dx_want[xi] += double{dy[yi]} * kernel[ki];
      dx_mag[xi] += std::abs(double{dy[yi]} * kernel[ki]);
      dk_want[ki] += double{x[xi]} * dy[yi];
      dk_mag[ki] += std::abs(double{x[xi]} * dy[yi]);
    });

    // Outputs start as garbage: every call overwrites all of its output.
    std::vector<float> y(y_size, 7.0f), dx(x_size, 7.0f), dk(k_size, 7.0f);
    ASSERT_TRUE(cpu_ops::DirectConvForward(g, c.filters, x.data(),
                                           kernel.data(), y.data(), &scratch_)
                    .ok());
    ASSERT_TRUE(cpu_ops::DirectConvBackwardData(g, c.filters, dy.data(),
                                                kernel.data(), dx.data(),
                                                &scratch_)
                    .ok());
    ASSERT_TRUE(cpu_ops::DirectConvBackwardFilter(
                    g, c.filters, x.data(), dy.data(), dk.data(), &scratch_)
                    .ok());
    ExpectNear(y, y_want, y_mag, "forward");
    ExpectNear(dx, dx_want, dx_mag, "input gradient");
    ExpectNear(dk, dk_want, dk_mag, "kernel gradient");
  }
}

TEST_F(DirectConvTest, SameBitsEveryRun) {
  const Case c = Cases()[1];
  const WindowGeometry g = c.Window();
  const std::vector<float> x = RandomFloats(g.input.Size(), 11);
  const std::vector<float> kernel = RandomFloats(g.PatchSize() * c.filters, 12);
  const std::vector<float> dy = RandomFloats(g.OutputPixels() * c.filters, 13);
  std::vector<float> first[3], again[3];
  for (std::vector<float>* out : {first, again}) {
    out[0].resize(dy.size());
    out[1].resize(x.size());
    out[2].resize(kernel.size());
    ASSERT_TRUE(cpu_ops::DirectConvForward(g, c.filters, x.data(),
                                           kernel.data(), out[0].data(),
                                           &scratch_)
                    .ok());
    ASSERT_TRUE(cpu_ops::DirectConvBackwardData(g, c.filters, dy.data(),
                                                kernel.data(), out[1].data(),
                                                &scratch_)
                    .ok());
    ASSERT_TRUE(cpu_ops::DirectConvBackwardFilter(
                    g, c.filters, x.data(), dy.data(), out[2].data(), &scratch_)
                    .ok());
  }
  for (int i = 0; i < 3; ++i) EXPECT_EQ(first[i], again[i]) << i;
}

// Images of zero width, height or channels: every window lies in the
// padding, so the output and the kernel gradient are zeros, and the input
// may be null.
TEST_F(DirectConvTest, EmptyImagesGiveZeros) {
  for (const Case& c : {Case{1, 3, 0, 2, 1, 1, 1, 1, 0, 1, 0, 0, 3},
                        Case{2, 0, 2, 4, 1, 2, 1, 1, 1, 1, 1, 1, 17},
                        Case{1, 2, 2, 0, 1, 1, 1, 1, 1, 1, 1, 1, 2}}) {
    SCOPED_TRACE(c.Name());
    const WindowGeometry g = c.Window();
    ASSERT_GT(g.OutputPixels(), 0);
    ASSERT_EQ(g.input.Size(), 0);
    std::vector<float> y(g.OutputPixels() * c.filters, 7.0f);
    std::vector<float> dy(y.size(), 1.0f);
    std::vector<float> kernel(g.PatchSize() * c.filters, 1.0f);
    std::vector<float> dk(kernel.size(), 7.0f);
    ConvScratch fresh;
    ASSERT_TRUE(cpu_ops::DirectConvForward(g, c.filters, nullptr, kernel.data(),
                                           y.data(), &fresh)
                    .ok());
    EXPECT_EQ(y, std::vector<float>(y.size(), 0.0f));
    ASSERT_TRUE(cpu_ops::DirectConvBackwardFilter(g, c.filters, nullptr,
                                                  dy.data(), dk.data(), &fresh)
                    .ok());
    EXPECT_EQ(dk, std::vector<float>(dk.size(), 0.0f));
    EXPECT_TRUE(cpu_ops::DirectConvBackwardData(g, c.filters, dy.data(),
                                                kernel.data(), nullptr, &fresh)
                    .ok());
  }
}

// The runner splits the batch by images across threads: with one thread
// it gives cpu_ops's bits; with more, the same outputs and input gradients
// (each image alone) and kernel gradients summed per thread, then across
// threads, the same bits every run; with more threads than images too.
TEST_F(DirectConvTest, RunnerSplitsTheBatchAcrossThreads) {
  for (const int batch : {7, 2}) {
    Case c = Cases()[2];  // 32x32x16, 3x3 stride 2 -> 32 filters.
    c.batch = batch;
    SCOPED_TRACE(c.Name());
    const WindowGeometry g = c.Window();
    const std::vector<float> x = RandomFloats(g.input.Size(), 21);
    const std::vector<float> kernel =
        RandomFloats(g.PatchSize() * c.filters, 22);
    const std::vector<float> dy =
        RandomFloats(g.OutputPixels() * c.filters, 23);
    auto run = [&](DirectConvRunner& runner) {
      std::vector<std::vector<float>> out = {std::vector<float>(dy.size()),
                                             std::vector<float>(x.size()),
                                             std::vector<float>(kernel.size())};
      EXPECT_TRUE(
          runner.Forward(g, c.filters, x.data(), kernel.data(), out[0].data())
              .ok());
      EXPECT_TRUE(runner
                      .BackwardData(g, c.filters, dy.data(), kernel.data(),
                                    out[1].data())
                      .ok());
      EXPECT_TRUE(
          runner
              .BackwardFilter(g, c.filters, x.data(), dy.data(), out[2].data())
              .ok());
      return out;
    };
    std::vector<float> want[3] = {std::vector<float>(dy.size()),
                                  std::vector<float>(x.size()),
                                  std::vector<float>(kernel.size())};
    ASSERT_TRUE(cpu_ops::DirectConvForward(g, c.filters, x.data(),
                                           kernel.data(), want[0].data(),
                                           &scratch_)
                    .ok());
    ASSERT_TRUE(cpu_ops::DirectConvBackwardData(g, c.filters, dy.data(),
                                                kernel.data(), want[1].data(),
                                                &scratch_)
                    .ok());
    ASSERT_TRUE(cpu_ops::DirectConvBackwardFilter(g, c.filters, x.data(),
                                                  dy.data(), want[2].data(),
                                                  &scratch_)
                    .ok());
    DirectConvRunner one(1);
    const auto single = run(one);
    for (int i = 0; i < 3; ++i) EXPECT_EQ(single[i], want[i]) << i;
    DirectConvRunner three(3);
    const auto first = run(three);
    const auto again = run(three);
    EXPECT_EQ(first[0], want[0]);
    EXPECT_EQ(first[1], want[1]);
    EXPECT_EQ(again[2], first[2]);
    double scale = 0;
    for (float v : want[2]) scale = std::max(scale, std::abs(double{v}));
    for (size_t i = 0; i < want[2].size(); ++i) {
      ASSERT_NEAR(first[2][i], want[2][i], 1e-5 * scale) << i;
    }
  }
}

}  // namespace
}  // namespace lockstep
