// MaxPooling2D, GlobalAveragePooling2D and ZeroPadding2D.
#include <memory>
#include <string>
#include <vector>

#include "gtest/gtest.h"
#include "tests/unit/nn_test_util.h"
#include "worker/model/nn/global_average_pooling2d.h"
#include "worker/model/nn/max_pooling2d.h"
#include "worker/model/nn/zero_padding2d.h"

namespace lockstep {
namespace {

using nn_test::RefWindow;
using nn_test::Vec;

using PoolingLayersTest = nn_test::OnEachDevice;

MaxPooling2DOptions Pool(int ph, int pw, int sh, int sw, Padding padding) {
  MaxPooling2DOptions o;
  o.pool_height = ph;
  o.pool_width = pw;
  o.stride_height = sh;
  o.stride_width = sw;
  o.padding = padding;
  return o;
}

TEST_P(PoolingLayersTest, MaxPoolingMatchesReferenceAndFiniteDifferences) {
  struct Case {
    std::string label;
    int batch;
    TensorShape input;
    MaxPooling2DOptions options;
    RefWindow window;  // By hand.
  };
  const Case cases[] = {
      // Overlapping windows: an element can win twice.
      {"3x3/2 valid",
       2,
       {7, 6, 3},
       Pool(3, 3, 2, 2, Padding::kValid),
       {2, 7, 6, 3, 3, 3, 2, 2, 0, 0, 3, 2}},
      // total padding 1, all after: the last window row is half outside.
      {"2x2/2 same",
       2,
       {5, 5, 2},
       Pool(2, 2, 2, 2, Padding::kSame),
       {2, 5, 5, 2, 2, 2, 2, 2, 0, 0, 3, 3}},
      {"3x3/1 same",
       1,
       {4, 3, 2},
       Pool(3, 3, 1, 1, Padding::kSame),
       {1, 4, 3, 2, 3, 3, 1, 1, 1, 1, 4, 3}},
      // Strides 0: Keras's default, the pool size.
      {"2x3 default strides",
       3,
       {4, 7, 1},
       Pool(2, 3, 0, 0, Padding::kValid),
       {3, 4, 7, 1, 2, 3, 2, 3, 0, 0, 2, 2}},
  };
  uint64_t seed = 20;
  for (const Case& c : cases) {
    SCOPED_TRACE(c.label);
    auto pool = MaxPooling2D::Create("pool", c.input, c.options);
    ASSERT_TRUE(pool.ok()) << pool.status();
    EXPECT_EQ((*pool)->output_shape(),
              (TensorShape{c.window.out_h, c.window.out_w, c.input.channels}));
    const RefWindow g = c.window;
    nn_test::CheckLayer(
        *device_, **pool, c.batch,
        {nn_test::RandomFloats(c.batch * c.input.size(), ++seed)}, {}, {},
        [g](const std::vector<Vec>& in, const Vec&) {
          return nn_test::RefMaxPool(in[0], g);
        },
        /*training=*/true);
  }
}

TEST_P(PoolingLayersTest, MaxPoolingByHand) {
  // One 2x3 image, 2 channels; a 2x2 'same' pool with stride 2 gives 1x2.
  // Channel 0: 1 5 2 / 4 -3 9; channel 1: -1 -2 -3 / -4 -5 -6.
  const std::vector<float> x = {1, -1, 5, -2, 2, -3, 4, -4, -3, -5, 9, -6};
  auto pool =
      MaxPooling2D::Create("pool", {2, 3, 2}, Pool(2, 2, 2, 2, Padding::kSame));
  ASSERT_TRUE(pool.ok());
  const auto got = nn_test::RunLayer(*device_, **pool, 1, {x}, {}, {},
                                     {10, 20, 30, 40}, true);
  EXPECT_EQ(got.output, (std::vector<float>{5, -1, 9, -3}));
  // The gradient lands on the winners: 5 (index 2), -1 (1), 9 (10), -3 (5).
  EXPECT_EQ(got.input_grads[0],
            (std::vector<float>{0, 20, 10, 0, 0, 40, 0, 0, 0, 0, 30, 0}));
}

TEST_P(PoolingLayersTest, MaxPoolingBackwardNeedsItsForwardPass) {
  auto pool = MaxPooling2D::Create("pool", {2, 2, 1},
                                   Pool(2, 2, 0, 0, Padding::kValid));
  ASSERT_TRUE(pool.ok());
  ASSERT_TRUE((*pool)->Prepare(device_.get(), 1).ok());
  auto buffer = device_->Allocate(16 * sizeof(float));
  ASSERT_TRUE(buffer.ok());
  float* mem = (*buffer)->As<float>();
  const float* inputs[] = {mem};
  float* grads[] = {mem + 4};
  BackwardArgs b;
  b.batch = 1;
  b.inputs = inputs;
  b.output = mem + 8;
  b.output_grad = mem + 9;
  b.input_grads = grads;
  EXPECT_EQ((*pool)->Backward(b).code(), absl::StatusCode::kFailedPrecondition);
}

TEST_P(PoolingLayersTest, GlobalAveragePooling) {
  const int batch = 2;
  const TensorShape in = {3, 5, 4};
  auto gap = GlobalAveragePooling2D::Create("gap", in);
  ASSERT_TRUE(gap.ok());
  EXPECT_EQ((*gap)->output_shape(), (TensorShape{1, 1, 4}));
  nn_test::CheckLayer(
      *device_, **gap, batch, {nn_test::RandomFloats(batch * in.size(), 30)},
      {}, {},
      [&](const std::vector<Vec>& x, const Vec&) {
        Vec y(batch * in.channels, 0.0);
        for (int n = 0; n < batch; ++n)
          for (int p = 0; p < 15; ++p)
            for (int c = 0; c < 4; ++c) {
              y[n * 4 + c] += x[0][(n * 15 + p) * 4 + c] / 15.0;
            }
        return y;
      },
      true);
}

TEST_P(PoolingLayersTest, ZeroPadding) {
  const int batch = 2;
  const TensorShape in = {3, 2, 3};
  const Padding2D pad = {1, 2, 0, 3};  // top, bottom, left, right.
  auto layer = ZeroPadding2D::Create("pad", in, pad);
  ASSERT_TRUE(layer.ok());
  const TensorShape out = {6, 5, 3};
  EXPECT_EQ((*layer)->output_shape(), out);
  nn_test::CheckLayer(
      *device_, **layer, batch, {nn_test::RandomFloats(batch * in.size(), 31)},
      {}, {},
      [&](const std::vector<Vec>& x, const Vec&) {
        Vec y(batch * out.size(), 0.0);
        for (int n = 0; n < batch; ++n)
          for (int h = 0; h < 3; ++h)
            for (int w = 0; w < 2; ++w)
              for (int c = 0; c < 3; ++c) {
                y[((n * 6 + h + 1) * 5 + w) * 3 + c] =
                    x[0][((n * 3 + h) * 2 + w) * 3 + c];
              }
        return y;
      },
      true);
  EXPECT_FALSE(ZeroPadding2D::Create("pad", in, {0, -1, 0, 0}).ok());
}

INSTANTIATE_TEST_SUITE_P(Devices, PoolingLayersTest,
                         ::testing::ValuesIn(nn_test::TestDevices()),
                         nn_test::DeviceName);

}  // namespace
}  // namespace lockstep
