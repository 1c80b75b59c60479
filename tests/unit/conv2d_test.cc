#include "worker/model/nn/conv2d.h"

#include <memory>
#include <string>
#include <vector>

#include "gtest/gtest.h"
#include "tests/unit/nn_test_util.h"
#include "worker/model/nn/window.h"

namespace lockstep {
namespace {

using nn_test::RefWindow;
using nn_test::Vec;

TEST(KerasWindowTest, SamePaddingSplitsLikeTensorFlow) {
  struct Case {
    int in, k, s;
    Padding padding;
    int out, pad_before;
  };
  // pad_total = max((out - 1) * s + k - in, 0), pad_before = pad_total / 2.
  const Case cases[] = {
      {8, 3, 2, Padding::kSame, 4, 0},  // total 1: all after.
      {7, 3, 2, Padding::kSame, 4, 1},  // total 2.
      {5, 4, 1, Padding::kSame, 5, 1},  // total 3: 1 before, 2 after.
      {32, 3, 1, Padding::kSame, 32, 1},  {32, 1, 2, Padding::kSame, 16, 0},
      {1, 1, 2, Padding::kSame, 1, 0},    {7, 3, 2, Padding::kValid, 3, 0},
      {38, 7, 2, Padding::kValid, 16, 0},  // ResNet-50's conv1 at 32x32.
      {18, 3, 2, Padding::kValid, 8, 0},   // ...and its pool1.
  };
  for (const Case& c : cases) {
    auto g =
        KerasWindow("w", {c.in, c.in + 1, 2}, c.k, c.k, c.s, c.s, c.padding);
    ASSERT_TRUE(g.ok()) << g.status();
    EXPECT_EQ(g->out_height, c.out) << c.in << " " << c.k << " " << c.s;
    EXPECT_EQ(g->pad_top, c.pad_before) << c.in << " " << c.k << " " << c.s;
    EXPECT_EQ(g->input.channels, 2);
  }
  EXPECT_FALSE(KerasWindow("w", {4, 4, 1}, 5, 1, 1, 1, Padding::kValid).ok());
  EXPECT_FALSE(KerasWindow("w", {4, 4, 1}, 1, 1, 0, 1, Padding::kSame).ok());
  EXPECT_FALSE(KerasWindow("w", {0, 4, 1}, 1, 1, 1, 1, Padding::kSame).ok());
}

struct ConvCase {
  std::string label;
  int batch;
  TensorShape input;
  Conv2DOptions options;
  RefWindow window;  // Written out by hand, not from KerasWindow.
};

Conv2DOptions Options(int filters, int kh, int kw, int sh, int sw,
                      Padding padding, bool bias) {
  Conv2DOptions o;
  o.filters = filters;
  o.kernel_height = kh;
  o.kernel_width = kw;
  o.stride_height = sh;
  o.stride_width = sw;
  o.padding = padding;
  o.use_bias = bias;
  return o;
}

std::vector<ConvCase> Cases() {
  return {
      {"3x3 same",
       2,
       {5, 7, 3},
       Options(4, 3, 3, 1, 1, Padding::kSame, true),
       {2, 5, 7, 3, 3, 3, 1, 1, 1, 1, 5, 7}},
      // Rows: out 3, total 1 -> 0 before; columns: out 5, total 1 -> 0.
      {"3x2 stride 2x1 same",
       3,
       {6, 5, 2},
       Options(3, 3, 2, 2, 1, Padding::kSame, true),
       {3, 6, 5, 2, 3, 2, 2, 1, 0, 0, 3, 5}},
      // Rows: out 3, total 2 -> 1 before.
      {"3x3 stride 2 same odd",
       1,
       {5, 5, 2},
       Options(2, 3, 3, 2, 2, Padding::kSame, false),
       {1, 5, 5, 2, 3, 3, 2, 2, 1, 1, 3, 3}},
      {"3x3 stride 2 valid no bias",
       2,
       {7, 6, 3},
       Options(4, 3, 3, 2, 2, Padding::kValid, false),
       {2, 7, 6, 3, 3, 3, 2, 2, 0, 0, 3, 2}},
      {"1x1 direct",
       2,
       {3, 4, 5},
       Options(3, 1, 1, 1, 1, Padding::kValid, true),
       {2, 3, 4, 5, 1, 1, 1, 1, 0, 0, 3, 4}},
      {"1x1 stride 2",
       2,
       {5, 5, 3},
       Options(6, 1, 1, 2, 2, Padding::kValid, true),
       {2, 5, 5, 3, 1, 1, 2, 2, 0, 0, 3, 3}},
      {"7x7 stride 2 valid",
       1,
       {9, 10, 2},
       Options(2, 7, 7, 2, 2, Padding::kValid, true),
       {1, 9, 10, 2, 7, 7, 2, 2, 0, 0, 2, 2}},
  };
}

nn_test::Reference ConvReference(const ConvCase& c) {
  const int filters = c.options.filters;
  const size_t kernel_size = static_cast<size_t>(c.options.kernel_height) *
                             c.options.kernel_width * c.input.channels *
                             filters;
  const bool bias = c.options.use_bias;
  const RefWindow g = c.window;
  return [=](const std::vector<Vec>& in, const Vec& p) {
    return nn_test::RefConv2D(
        in[0], g, nn_test::Slice(p, 0, kernel_size),
        bias ? nn_test::Slice(p, kernel_size, filters) : Vec(), filters);
  };
}

using Conv2DTest = nn_test::OnEachDevice;

TEST_P(Conv2DTest, ForwardAndGradientsMatchDoubleReference) {
  uint64_t seed = 1;
  for (const ConvCase& c : Cases()) {
    SCOPED_TRACE(c.label);
    auto conv = Conv2D::Create("conv", c.input, c.options);
    ASSERT_TRUE(conv.ok()) << conv.status();
    EXPECT_EQ((*conv)->output_shape(),
              (TensorShape{c.window.out_h, c.window.out_w, c.options.filters}));
    const auto x = nn_test::RandomFloats(c.batch * c.input.size(), ++seed);
    const auto p = nn_test::RandomFloats((*conv)->NumParameters(), ++seed);
    nn_test::CheckLayer(*device_, **conv, c.batch, {x}, p, {}, ConvReference(c),
                        /*training=*/true);
  }
}

TEST_P(Conv2DTest, GroupedIm2ColGivesTheSameAnswers) {
  const ConvCase c = Cases()[1];
  Conv2DOptions small = c.options;
  // One image's columns: 3x5 pixels x (3x2x2) patch = 180 floats.
  small.workspace_limit_floats = 2 * 180 - 1;
  auto whole = Conv2D::Create("whole", c.input, c.options);
  auto grouped = Conv2D::Create("grouped", c.input, small);
  ASSERT_TRUE(whole.ok() && grouped.ok());
  EXPECT_EQ((*whole)->WorkspaceFloats(3), 3u * 180);
  EXPECT_EQ((*grouped)->WorkspaceFloats(3), 180u);
  small.workspace_limit_floats = 1;  // Still one image at a time.
  EXPECT_EQ((*Conv2D::Create("tiny", c.input, small))->WorkspaceFloats(3),
            180u);

  const auto x = nn_test::RandomFloats(c.batch * c.input.size(), 7);
  const auto p = nn_test::RandomFloats((*whole)->NumParameters(), 8);
  const auto dy = nn_test::RandomFloats(c.batch * 3 * 5 * 3, 9);
  const auto a =
      nn_test::RunLayer(*device_, **whole, c.batch, {x}, p, {}, dy, true);
  const auto b =
      nn_test::RunLayer(*device_, **grouped, c.batch, {x}, p, {}, dy, true);
  // cuBLAS may pick other kernels for the smaller products: a few more ulps.
  const double tol = GetParam() == "cuda" ? 1e-5 : 1e-6;
  nn_test::ExpectNear(b.output, nn_test::ToDouble(a.output), tol, "output");
  nn_test::ExpectNear(b.input_grads[0], nn_test::ToDouble(a.input_grads[0]),
                      tol, "dx");
  nn_test::ExpectNear(b.param_grads, nn_test::ToDouble(a.param_grads), tol,
                      "dW");
}

TEST_P(Conv2DTest, SmallerBatchAfterLargerOne) {
  const ConvCase c = Cases()[0];
  auto conv = Conv2D::Create("conv", c.input, c.options);
  ASSERT_TRUE(conv.ok());
  ASSERT_TRUE((*conv)->Prepare(device_.get(), 4).ok());
  const auto x4 = nn_test::RandomFloats(4 * c.input.size(), 1);
  const auto p = nn_test::RandomFloats((*conv)->NumParameters(), 2);
  nn_test::RunLayer(*device_, **conv, 4, {x4}, p, {},
                    nn_test::RandomFloats(4 * 5 * 7 * 4, 3), true,
                    /*prepare=*/false);
  const std::vector<float> x1(x4.begin(), x4.begin() + c.input.size());
  RefWindow g = c.window;
  g.batch = 1;
  const auto got = nn_test::RunLayer(*device_, **conv, 1, {x1}, p, {}, {}, true,
                                     /*prepare=*/false);
  const Vec pd = nn_test::ToDouble(p);
  const size_t k = 3 * 3 * 3 * 4;
  nn_test::ExpectNear(
      got.output,
      nn_test::RefConv2D(nn_test::ToDouble(x1), g, nn_test::Slice(pd, 0, k),
                         nn_test::Slice(pd, k, 4), 4),
      1e-5, "batch 1 after batch 4");
}

TEST_P(Conv2DTest, ParametersFollowKeras) {
  auto conv = Conv2D::Create("c", {9, 9, 3},
                             Options(8, 3, 5, 1, 1, Padding::kSame, true));
  ASSERT_TRUE(conv.ok());
  const std::vector<ParamSpec> p = (*conv)->Parameters();
  ASSERT_EQ(p.size(), 2u);
  EXPECT_EQ(p[0].name, "kernel");
  EXPECT_EQ(p[0].shape, (std::vector<int64_t>{3, 5, 3, 8}));
  EXPECT_EQ(p[0].initializer, Initializer::kGlorotUniform);
  EXPECT_EQ(p[0].fan_in, 3 * 5 * 3);
  EXPECT_EQ(p[0].fan_out, 3 * 5 * 8);
  EXPECT_EQ(p[1].name, "bias");
  EXPECT_EQ(p[1].shape, (std::vector<int64_t>{8}));
  EXPECT_EQ(p[1].initializer, Initializer::kZeros);
  EXPECT_EQ((*conv)->NumParameters(), 3 * 5 * 3 * 8 + 8);
  EXPECT_TRUE((*conv)->States().empty());
  auto no_bias = Conv2D::Create("c", {9, 9, 3},
                                Options(8, 1, 1, 1, 1, Padding::kValid, false));
  ASSERT_TRUE(no_bias.ok());
  EXPECT_EQ((*no_bias)->NumParameters(), 3 * 8);
}

TEST_P(Conv2DTest, RejectsBadOptionsAndCalls) {
  EXPECT_FALSE(Conv2D::Create("c", {4, 4, 1},
                              Options(0, 3, 3, 1, 1, Padding::kSame, true))
                   .ok());
  EXPECT_FALSE(Conv2D::Create("c", {4, 4, 1},
                              Options(2, 5, 3, 1, 1, Padding::kValid, true))
                   .ok());
  auto conv = Conv2D::Create("c", {4, 4, 1},
                             Options(2, 3, 3, 1, 1, Padding::kSame, true));
  ASSERT_TRUE(conv.ok());
  ForwardArgs args;
  args.batch = 1;
  EXPECT_EQ((*conv)->Forward(args).code(),
            absl::StatusCode::kFailedPrecondition);
  ASSERT_TRUE((*conv)->Prepare(device_.get(), 2).ok());
  EXPECT_EQ((*conv)->Prepare(device_.get(), 2).code(),
            absl::StatusCode::kFailedPrecondition);
  EXPECT_EQ((*conv)->Forward(args).code(),
            absl::StatusCode::kInvalidArgument);  // No pointers.
  args.batch = 3;
  EXPECT_EQ((*conv)->Forward(args).code(),
            absl::StatusCode::kInvalidArgument);  // Above max_batch.
}

INSTANTIATE_TEST_SUITE_P(Devices, Conv2DTest,
                         ::testing::ValuesIn(nn_test::TestDevices()),
                         nn_test::DeviceName);

}  // namespace
}  // namespace lockstep
