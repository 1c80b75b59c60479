// The per-element image ops of worker/device/image_op_elements.h -- the code
// the CUDA kernels run -- run here on the CPU, element by element, against the
// CPU device's loops: bit for bit for the index-only ops (they add in the
// same order), to float rounding for batch normalization's arithmetic. So
// the GPU's index math is tested on every machine, with or without a GPU.
#include "worker/device/image_op_elements.h"

#include <algorithm>
#include <cstdint>
#include <limits>
#include <memory>
#include <string>
#include <vector>

#include "absl/strings/str_format.h"
#include "common/base/random.h"
#include "gtest/gtest.h"
#include "worker/device/cpu/cpu_device.h"
#include "worker/device/image_geometry.h"

namespace lockstep {
namespace {

std::vector<float> RandomFloats(size_t n, uint64_t seed) {
  Random random(seed);
  std::vector<float> v(n);
  for (float& x : v) {
    do {
      x = random.Uniform(-1.0f, 1.0f);
    } while (x == 0.0f);
  }
  return v;
}

// Windows of every kind: strides below, equal to and above the window,
// padding up to the window's size (so some windows lie wholly in it), and
// outputs that run past the image on the right and below.
std::vector<WindowGeometry> Windows() {
  std::vector<WindowGeometry> windows;
  Random random(7);
  for (int k = 0; k < 60; ++k) {
    WindowGeometry g;
    g.input = {1 + static_cast<int>(random.UniformInt(3)),
               1 + static_cast<int>(random.UniformInt(7)),
               1 + static_cast<int>(random.UniformInt(7)),
               1 + static_cast<int>(random.UniformInt(4))};
    g.window_height = 1 + static_cast<int>(random.UniformInt(4));
    g.window_width = 1 + static_cast<int>(random.UniformInt(4));
    g.stride_height = 1 + static_cast<int>(random.UniformInt(3));
    g.stride_width = 1 + static_cast<int>(random.UniformInt(3));
    g.pad_top = static_cast<int>(random.UniformInt(g.window_height + 1));
    g.pad_left = static_cast<int>(random.UniformInt(g.window_width + 1));
    g.out_height =
        std::max(1, (g.input.height + 2 * g.pad_top - g.window_height) /
                            g.stride_height +
                        1);
    g.out_width = std::max(
        1,
        (g.input.width + 2 * g.pad_left - g.window_width) / g.stride_width + 1);
    windows.push_back(g);
  }
  // ResNet-50's stem at 32x32: a 7x7 stride-2 convolution over the padded
  // 38x38 image, then 3x3 stride-2 pooling.
  windows.push_back({{2, 38, 38, 3}, 7, 7, 2, 2, 0, 0, 16, 16});
  windows.push_back({{2, 18, 18, 4}, 3, 3, 2, 2, 0, 0, 8, 8});
  return windows;
}

std::string Describe(const WindowGeometry& g) {
  return absl::StrFormat(
      "input %dx%dx%dx%d window %dx%d stride %dx%d pad %d,%d out %dx%d",
      g.input.batch, g.input.height, g.input.width, g.input.channels,
      g.window_height, g.window_width, g.stride_height, g.stride_width,
      g.pad_top, g.pad_left, g.out_height, g.out_width);
}

class ImageOpElementsTest : public ::testing::Test {
 protected:
  std::unique_ptr<Device> cpu_ = CpuDevice::Create(1);
};

// Both index widths the kernels use must give the same elements.
template <typename Fn>
void ForBothIndexTypes(int64_t n, Fn fn) {
  for (int64_t i = 0; i < n; ++i) {
    fn(static_cast<int32_t>(i), i);
  }
}

TEST_F(ImageOpElementsTest, Im2ColAndCol2ImMatchTheCpuDeviceExactly) {
  uint64_t seed = 100;
  for (const WindowGeometry& g : Windows()) {
    SCOPED_TRACE(Describe(g));
    const elements::Window e = ToElements(g);
    const std::vector<float> image = RandomFloats(g.input.Size(), ++seed);
    const int64_t total = g.OutputPixels() * g.PatchSize();
    std::vector<float> want(total);
    ASSERT_TRUE(cpu_->Im2Col(g, image.data(), want.data()).ok());
    ForBothIndexTypes(total, [&](int32_t i32, int64_t i64) {
      ASSERT_EQ(elements::Im2ColAt(e, image.data(), i32), want[i64]) << i64;
      ASSERT_EQ(elements::Im2ColAt(e, image.data(), i64), want[i64]) << i64;
    });

    const std::vector<float> columns = RandomFloats(total, ++seed);
    std::vector<float> want_image(g.input.Size());
    ASSERT_TRUE(cpu_->Col2Im(g, columns.data(), want_image.data()).ok());
    ForBothIndexTypes(g.input.Size(), [&](int32_t i32, int64_t i64) {
      ASSERT_EQ(elements::Col2ImAt(e, columns.data(), i32), want_image[i64])
          << i64;
      ASSERT_EQ(elements::Col2ImAt(e, columns.data(), i64), want_image[i64])
          << i64;
    });
  }
}

TEST_F(ImageOpElementsTest, MaxPoolingMatchesTheCpuDeviceExactly) {
  uint64_t seed = 200;
  int windows_in_padding = 0;
  for (const WindowGeometry& g : Windows()) {
    SCOPED_TRACE(Describe(g));
    const elements::Window e = ToElements(g);
    // Few distinct values, so ties are common and the first must win.
    std::vector<float> x = RandomFloats(g.input.Size(), ++seed);
    for (float& v : x) v = static_cast<float>(static_cast<int>(v * 3.0f));
    const int64_t outputs = g.OutputPixels() * g.input.channels;
    std::vector<float> want_y(outputs), got_y(outputs);
    std::vector<int32_t> want_arg(outputs), got_arg(outputs);
    ASSERT_TRUE(
        cpu_->MaxPoolForward(g, x.data(), want_y.data(), want_arg.data()).ok());
    for (int64_t i = 0; i < outputs; ++i) {
      elements::MaxPoolAt(e, x.data(), i, got_y.data(), got_arg.data());
    }
    EXPECT_EQ(got_y, want_y);
    EXPECT_EQ(got_arg, want_arg);
    windows_in_padding += std::count(want_arg.begin(), want_arg.end(), -1);

    const std::vector<float> dy = RandomFloats(outputs, ++seed);
    std::vector<float> want_dx(g.input.Size());
    ASSERT_TRUE(
        cpu_->MaxPoolBackward(g, dy.data(), want_arg.data(), want_dx.data())
            .ok());
    ForBothIndexTypes(g.input.Size(), [&](int32_t i32, int64_t i64) {
      ASSERT_EQ(elements::MaxPoolGradAt(e, dy.data(), want_arg.data(), i32),
                want_dx[i64])
          << i64;
      ASSERT_EQ(elements::MaxPoolGradAt(e, dy.data(), want_arg.data(), i64),
                want_dx[i64])
          << i64;
    });
  }
  EXPECT_GT(windows_in_padding, 0) << "no window lay wholly in the padding";
}

// A stride near INT_MAX with one output row: the windows holding a row are
// found without overflowing int (found with UBSan: rounding up as
// low + stride - 1 wrapped, and the gradient then read argmax[-1]).
TEST_F(ImageOpElementsTest, MaxPoolGradientWithAStrideNearIntMax) {
  WindowGeometry g;
  g.input = {1, 3, 1, 1};
  g.stride_height = std::numeric_limits<int>::max();
  g.out_height = 1;
  g.out_width = 1;
  ASSERT_TRUE(ValidateWindow("test", g).ok());
  const std::vector<float> x = {5.0f, 6.0f, 7.0f};
  float y = 0.0f;
  int32_t argmax = -5;
  ASSERT_TRUE(cpu_->MaxPoolForward(g, x.data(), &y, &argmax).ok());
  ASSERT_EQ(argmax, 0);  // The one window holds row 0 only.
  const float dy = 2.5f;
  std::vector<float> want_dx(3, 9.0f);
  ASSERT_TRUE(cpu_->MaxPoolBackward(g, &dy, &argmax, want_dx.data()).ok());
  EXPECT_EQ(want_dx, (std::vector<float>{2.5f, 0.0f, 0.0f}));
  const elements::Window e = ToElements(g);
  for (int32_t i = 0; i < 3; ++i) {
    EXPECT_EQ(elements::MaxPoolGradAt(e, &dy, &argmax, i), want_dx[i]) << i;
  }
  const elements::OutputRange row2 = elements::WindowsHolding(
      2, 0, 1, std::numeric_limits<int>::max(), 1);
  EXPECT_GT(row2.first, row2.last) << "row 2 is in no window";
}

TEST_F(ImageOpElementsTest, ZeroPaddingMatchesTheCpuDeviceExactly) {
  const NhwcShape shapes[] = {{2, 3, 4, 3}, {1, 1, 1, 1}, {3, 5, 2, 2}};
  const Padding2D paddings[] = {
      {1, 1, 1, 1}, {3, 3, 3, 3}, {0, 2, 1, 0}, {0, 0, 0, 0}};
  uint64_t seed = 300;
  for (const NhwcShape& s : shapes) {
    for (const Padding2D& p : paddings) {
      const elements::Pad e = ToElements(s, p);
      const std::vector<float> x = RandomFloats(s.Size(), ++seed);
      const int64_t padded = int64_t{s.batch} * (s.height + p.top + p.bottom) *
                             (s.width + p.left + p.right) * s.channels;
      std::vector<float> want(padded);
      ASSERT_TRUE(cpu_->ZeroPad2D(s, p, x.data(), want.data()).ok());
      for (int64_t i = 0; i < padded; ++i) {
        ASSERT_EQ(elements::ZeroPadAt(e, x.data(), i), want[i]) << i;
      }
      const std::vector<float> dy = RandomFloats(padded, ++seed);
      std::vector<float> want_dx(s.Size());
      ASSERT_TRUE(
          cpu_->ZeroPad2DBackward(s, p, dy.data(), want_dx.data()).ok());
      for (int64_t i = 0; i < s.Size(); ++i) {
        ASSERT_EQ(elements::ZeroPadGradAt(e, dy.data(), static_cast<int>(i)),
                  want_dx[i])
            << i;
      }
    }
  }
}

TEST_F(ImageOpElementsTest, GlobalAveragePoolingMatchesTheCpuDeviceExactly) {
  const int batch = 3, pixels = 49, channels = 5;
  const std::vector<float> x = RandomFloats(batch * pixels * channels, 400);
  std::vector<float> want(batch * channels);
  ASSERT_TRUE(
      cpu_->GlobalAvgPool(batch, pixels, channels, x.data(), want.data()).ok());
  for (int i = 0; i < batch * channels; ++i) {
    ASSERT_EQ(elements::GlobalAvgPoolAt(pixels, channels, x.data(), i), want[i])
        << i;
  }
  const std::vector<float> dy = RandomFloats(batch * channels, 401);
  std::vector<float> want_dx(x.size());
  ASSERT_TRUE(cpu_->GlobalAvgPoolBackward(batch, pixels, channels, dy.data(),
                                          want_dx.data())
                  .ok());
  for (int i = 0; i < batch * pixels * channels; ++i) {
    ASSERT_EQ(elements::GlobalAvgPoolGradAt(pixels, channels, dy.data(), i),
              want_dx[i])
        << i;
  }
}

// Within a few float roundings: the CPU device's compiler may fuse a
// multiply and an add where this test's did not, or the other way round.
void ExpectFloatNear(const std::vector<float>& got,
                     const std::vector<float>& want, const char* what) {
  ASSERT_EQ(got.size(), want.size()) << what;
  for (size_t i = 0; i < got.size(); ++i) {
    ASSERT_NEAR(got[i], want[i], 4e-7 * std::max(1.0f, std::abs(want[i])))
        << what << "[" << i << "]";
  }
}

// One batch-normalization problem: rows x channels activations, their
// parameters, the output gradient and the moving statistics before the step.
struct BatchNormProblem {
  int rows = 37, channels = 6;
  float epsilon = 1e-3f, momentum = 0.99f;
  std::vector<float> x, gamma, beta, dy, moving_mean0, moving_variance0;
};

BatchNormProblem MakeBatchNormProblem() {
  BatchNormProblem p;
  p.x = RandomFloats(p.rows * p.channels, 500);
  for (float& v : p.x) v = 3.0f * v + 5.0f;  // An offset the two passes absorb.
  p.gamma = RandomFloats(p.channels, 501);
  p.beta = RandomFloats(p.channels, 502);
  p.dy = RandomFloats(p.rows * p.channels, 503);
  p.moving_mean0 = RandomFloats(p.channels, 504);
  p.moving_variance0 = RandomFloats(p.channels, 505);
  for (float& v : p.moving_variance0) v = std::abs(v);
  return p;
}

// What training, its backward pass and inference give: y, the moving and
// saved statistics, the gradients and the inference output.
struct BatchNormResults {
  explicit BatchNormResults(const BatchNormProblem& p)
      : y(p.x.size()),
        mm(p.moving_mean0),
        mv(p.moving_variance0),
        mean(p.channels),
        inv_std(p.channels),
        dx(p.x.size()),
        dgamma(p.channels),
        dbeta(p.channels),
        inference(p.x.size()) {}

  std::vector<float> y, mm, mv, mean, inv_std, dx, dgamma, dbeta, inference;
};

// The CPU device's three passes.
void RunOnDevice(Device& device, const BatchNormProblem& p,
                 BatchNormResults* want) {
  ASSERT_TRUE(device
                  .BatchNormTraining(p.rows, p.channels, p.x.data(),
                                     p.gamma.data(), p.beta.data(), p.epsilon,
                                     p.momentum, want->y.data(),
                                     want->mm.data(), want->mv.data(),
                                     want->mean.data(), want->inv_std.data())
                  .ok());
  ASSERT_TRUE(device
                  .BatchNormBackward(
                      p.rows, p.channels, p.x.data(), p.dy.data(),
                      p.gamma.data(), want->mean.data(), want->inv_std.data(),
                      want->dx.data(), want->dgamma.data(), want->dbeta.data())
                  .ok());
  ASSERT_TRUE(device
                  .BatchNormInference(p.rows, p.channels, p.x.data(),
                                      p.gamma.data(), p.beta.data(),
                                      p.moving_mean0.data(),
                                      p.moving_variance0.data(), p.epsilon,
                                      want->inference.data())
                  .ok());
}

// Channel c through the elements, as the kernels call them.
void RunChannelOnElements(const BatchNormProblem& p, int c,
                          BatchNormResults* got) {
  const int rows = p.rows, channels = p.channels;
  const std::vector<float>& x = p.x;
  const std::vector<float>& dy = p.dy;
  double sum = 0.0, centered = 0.0;
  for (int r = 0; r < rows; ++r) sum += x[r * channels + c];
  got->mean[c] = elements::BatchNormMean(sum, rows);
  for (int r = 0; r < rows; ++r) {
    const double d = static_cast<double>(x[r * channels + c]) - got->mean[c];
    centered += d * d;
  }
  const elements::BatchNormChannel k = elements::BatchNormTrainingChannel(
      sum, centered, rows, p.gamma[c], p.epsilon, p.momentum, &got->mm[c],
      &got->mv[c]);
  EXPECT_EQ(k.mean, got->mean[c]);
  got->inv_std[c] = k.inv_std;
  double sum_dy = 0.0, sum_dy_xhat = 0.0;
  for (int r = 0; r < rows; ++r) {
    const int at = r * channels + c;
    got->y[at] = elements::BatchNormApply(x[at], k.mean, k.scale, p.beta[c]);
    sum_dy += dy[at];
    sum_dy_xhat += static_cast<double>(dy[at]) *
                   elements::BatchNormXhat(x[at], k.mean, k.inv_std);
  }
  const elements::BatchNormGradChannel gk = elements::BatchNormBackwardChannel(
      sum_dy, sum_dy_xhat, rows, p.gamma[c], k.inv_std);
  got->dgamma[c] = gk.dgamma;
  got->dbeta[c] = gk.dbeta;
  const float scale = elements::BatchNormInferenceScale(
      p.gamma[c], p.moving_variance0[c], p.epsilon);
  for (int r = 0; r < rows; ++r) {
    const int at = r * channels + c;
    got->dx[at] = elements::BatchNormInputGrad(
        gk, dy[at], elements::BatchNormXhat(x[at], k.mean, k.inv_std));
    got->inference[at] =
        elements::BatchNormApply(x[at], p.moving_mean0[c], scale, p.beta[c]);
  }
}

// Batch normalization: the kernels' sums are done here in double, as the
// CPU device does them; the elements functions turn them into outputs.
TEST_F(ImageOpElementsTest, BatchNormalizationMatchesTheCpuDevice) {
  const BatchNormProblem p = MakeBatchNormProblem();
  BatchNormResults want(p), got(p);
  ASSERT_NO_FATAL_FAILURE(RunOnDevice(*cpu_, p, &want));
  for (int c = 0; c < p.channels; ++c) RunChannelOnElements(p, c, &got);
  ExpectFloatNear(got.mean, want.mean, "saved mean");
  ExpectFloatNear(got.inv_std, want.inv_std, "saved inv_std");
  ExpectFloatNear(got.mm, want.mm, "moving mean");
  ExpectFloatNear(got.mv, want.mv, "moving variance");
  ExpectFloatNear(got.y, want.y, "y");
  ExpectFloatNear(got.dgamma, want.dgamma, "dgamma");
  ExpectFloatNear(got.dbeta, want.dbeta, "dbeta");
  ExpectFloatNear(got.dx, want.dx, "dx");
  ExpectFloatNear(got.inference, want.inference, "inference y");
}

TEST(ImageGeometryTest, ToElementsCopiesEveryField) {
  const WindowGeometry g = {{2, 3, 4, 5}, 6, 7, 8, 9, 10, 11, 12, 13};
  const elements::Window e = ToElements(g);
  EXPECT_EQ(
      (std::vector<int>{e.batch, e.height, e.width, e.channels, e.window_height,
                        e.window_width, e.stride_height, e.stride_width,
                        e.pad_top, e.pad_left, e.out_height, e.out_width}),
      (std::vector<int>{2, 3, 4, 5, 6, 7, 8, 9, 10, 11, 12, 13}));
  const elements::Pad p = ToElements(NhwcShape{1, 2, 3, 4}, {5, 6, 7, 8});
  EXPECT_EQ((std::vector<int>{p.batch, p.height, p.width, p.channels, p.top,
                              p.bottom, p.left, p.right}),
            (std::vector<int>{1, 2, 3, 4, 5, 6, 7, 8}));
}

}  // namespace
}  // namespace lockstep
