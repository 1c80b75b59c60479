// ReLU, Add, Flatten and Dense.
#include <memory>
#include <vector>

#include "gtest/gtest.h"
#include "tests/unit/nn_test_util.h"
#include "worker/model/nn/add.h"
#include "worker/model/nn/dense.h"
#include "worker/model/nn/flatten.h"
#include "worker/model/nn/relu.h"

namespace lockstep {
namespace {

using nn_test::Vec;

using BasicLayersTest = nn_test::OnEachDevice;

TEST_P(BasicLayersTest, ReLU) {
  const TensorShape shape = {3, 2, 5};
  auto relu = ReLU::Create("relu", shape);
  ASSERT_TRUE(relu.ok());
  EXPECT_EQ((*relu)->output_shape(), shape);
  EXPECT_EQ((*relu)->NumParameters(), 0);
  nn_test::CheckLayer(
      *device_, **relu, 3, {nn_test::RandomAwayFromZero(3 * shape.size(), 40)},
      {}, {},
      [](const std::vector<Vec>& x, const Vec&) {
        return nn_test::RefRelu(x[0]);
      },
      true);
  auto one = ReLU::Create("one", {1, 1, 4});
  ASSERT_TRUE(one.ok());
  const auto got = nn_test::RunLayer(*device_, **one, 1, {{-2, 0, 3, -0.5f}},
                                     {}, {}, {1, 2, 3, 4}, true);
  EXPECT_EQ(got.output, (std::vector<float>{0, 0, 3, 0}));
  EXPECT_EQ(got.input_grads[0], (std::vector<float>{0, 0, 3, 0}));
}

TEST_P(BasicLayersTest, Add) {
  const TensorShape shape = {2, 3, 4};
  auto add = Add::Create("add", shape, shape);
  ASSERT_TRUE(add.ok());
  nn_test::CheckLayer(
      *device_, **add, 2,
      {nn_test::RandomFloats(2 * shape.size(), 41),
       nn_test::RandomFloats(2 * shape.size(), 42)},
      {}, {},
      [](const std::vector<Vec>& x, const Vec&) {
        Vec y = x[0];
        for (size_t i = 0; i < y.size(); ++i) y[i] += x[1][i];
        return y;
      },
      true);
  EXPECT_FALSE(Add::Create("add", shape, {2, 3, 5}).ok());
}

TEST_P(BasicLayersTest, FlattenKeepsNhwcOrder) {
  auto flatten = Flatten::Create("flatten", {2, 3, 4});
  ASSERT_TRUE(flatten.ok());
  EXPECT_EQ((*flatten)->output_shape(), (TensorShape{1, 1, 24}));
  const auto x = nn_test::RandomFloats(2 * 24, 43);
  const auto dy = nn_test::RandomFloats(2 * 24, 44);
  const auto got =
      nn_test::RunLayer(*device_, **flatten, 2, {x}, {}, {}, dy, true);
  EXPECT_EQ(got.output, x);
  EXPECT_EQ(got.input_grads[0], dy);
}

TEST_P(BasicLayersTest, DenseOnVectorsAndOnImages) {
  struct Case {
    int batch;
    TensorShape input;
    int units;
    bool bias;
  };
  // The last: Keras's Dense on an image applies the kernel at every pixel.
  const Case cases[] = {{3, {1, 1, 7}, 5, true},
                        {2, {1, 1, 4}, 3, false},
                        {2, {2, 3, 4}, 3, true}};
  uint64_t seed = 50;
  for (const Case& c : cases) {
    SCOPED_TRACE(c.input.ToString());
    DenseOptions o;
    o.units = c.units;
    o.use_bias = c.bias;
    auto dense = Dense::Create("dense", c.input, o);
    ASSERT_TRUE(dense.ok());
    EXPECT_EQ((*dense)->output_shape(),
              (TensorShape{c.input.height, c.input.width, c.units}));
    const int in = c.input.channels;
    const int rows = c.batch * c.input.height * c.input.width;
    const auto params = (*dense)->Parameters();
    ASSERT_EQ(params.size(), c.bias ? 2u : 1u);
    EXPECT_EQ(params[0].shape, (std::vector<int64_t>{in, c.units}));
    EXPECT_EQ(params[0].fan_in, in);
    EXPECT_EQ(params[0].fan_out, c.units);
    const size_t k = static_cast<size_t>(in) * c.units;
    const bool bias = c.bias;
    const int units = c.units;
    nn_test::CheckLayer(
        *device_, **dense, c.batch,
        {nn_test::RandomFloats(c.batch * c.input.size(), ++seed)},
        nn_test::RandomFloats((*dense)->NumParameters(), ++seed), {},
        [=](const std::vector<Vec>& x, const Vec& p) {
          return nn_test::RefDense(x[0], rows, in, nn_test::Slice(p, 0, k),
                                   bias ? nn_test::Slice(p, k, units) : Vec(),
                                   units);
        },
        true);
  }
  DenseOptions zero;
  zero.units = 0;
  EXPECT_FALSE(Dense::Create("dense", {1, 1, 3}, zero).ok());
}

INSTANTIATE_TEST_SUITE_P(Devices, BasicLayersTest,
                         ::testing::ValuesIn(nn_test::TestDevices()),
                         nn_test::DeviceName);

}  // namespace
}  // namespace lockstep
