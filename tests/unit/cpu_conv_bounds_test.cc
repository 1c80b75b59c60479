// The CPU device's direct convolution kernels (worker/device/cpu/cpu_conv.h)
// at the edges of what they accept: windows far past the image, window
// positions past int, and bad arguments refused before any memory is read.
#include <string>
#include <vector>

#include "absl/status/status.h"
#include "gmock/gmock.h"
#include "gtest/gtest.h"
#include "tests/unit/cpu_conv_test_util.h"
#include "worker/device/cpu/cpu_conv.h"
#include "worker/device/image_geometry.h"

namespace lockstep {
namespace {

using cpu_ops::ConvScratch;
using ::testing::HasSubstr;

// One pixel, a 1x1 window with a stride of 2^bits and 2^bits + 1 output
// rows: every window but the first lies past the image.
WindowGeometry TallStrides(int bits) {
  WindowGeometry g;
  g.input = {1, 1, 1, 1};
  g.stride_height = 1 << bits;
  g.out_height = (1 << bits) + 1;
  g.out_width = 1;
  return g;
}

// Windows far past the image: only output row 0 sees the image's pixel.
TEST_F(DirectConvTest, HugeStridesSeeOnlyTheFirstWindow) {
  const WindowGeometry g = TallStrides(15);
  const float x = 6.0f, kernel = 0.5f;
  std::vector<float> y(g.out_height, 7.0f), dy(g.out_height, 1.0f);
  ASSERT_TRUE(
      cpu_ops::DirectConvForward(g, 1, &x, &kernel, y.data(), &scratch_).ok());
  EXPECT_EQ(y[0], 3.0f);
  EXPECT_EQ(y[1], 0.0f);
  EXPECT_EQ(y[1 << 15], 0.0f);
  float dk = 7.0f, dx = 7.0f;
  ASSERT_TRUE(
      cpu_ops::DirectConvBackwardFilter(g, 1, &x, dy.data(), &dk, &scratch_)
          .ok());
  EXPECT_EQ(dk, 6.0f);  // Only output row 0 sees the pixel.
  ASSERT_TRUE(
      cpu_ops::DirectConvBackwardData(g, 1, dy.data(), &kernel, &dx, &scratch_)
          .ok());
  EXPECT_EQ(dx, 0.5f);
}

// With a stride of 2^16 and 2^16 + 1 output rows the last window starts at
// row 2^32, past int: every convolution refuses the geometry rather than
// wrap around to row 0.
TEST_F(DirectConvTest, RefusesWindowPositionsPastInt) {
  const WindowGeometry g = TallStrides(16);
  const float x = 6.0f, kernel = 0.5f;
  std::vector<float> y(g.out_height, 7.0f), dy(g.out_height, 1.0f);
  float dk = 7.0f, dx = 7.0f;
  for (const absl::Status& s :
       {cpu_ops::DirectConvForward(g, 1, &x, &kernel, y.data(), &scratch_),
        cpu_ops::DirectConvBackwardFilter(g, 1, &x, dy.data(), &dk, &scratch_),
        cpu_ops::DirectConvBackwardData(g, 1, dy.data(), &kernel, &dx,
                                        &scratch_)}) {
    EXPECT_EQ(s.code(), absl::StatusCode::kInvalidArgument) << s;
    EXPECT_THAT(s.message(), HasSubstr("window positions out of range"));
  }
  EXPECT_EQ(y[0], 7.0f);
  EXPECT_EQ(dk, 7.0f);
  EXPECT_EQ(dx, 7.0f);
}

TEST(DirectConvArgsTest, RefusesBadCallsBeforeTouchingMemory) {
  ConvScratch scratch;
  WindowGeometry g = Case{1, 4, 4, 2, 3, 3, 1, 1, 1, 1, 1, 1, 2}.Window();
  std::vector<float> x(g.input.Size(), 1.0f), k(g.PatchSize() * 2, 1.0f);
  std::vector<float> y(g.OutputPixels() * 2, 5.0f);
  absl::Status s =
      cpu_ops::DirectConvForward(g, 0, x.data(), k.data(), y.data(), &scratch);
  EXPECT_TRUE(absl::IsInvalidArgument(s)) << s;
  EXPECT_NE(s.message().find("filters"), std::string::npos) << s;
  s = cpu_ops::DirectConvForward(g, 2, nullptr, k.data(), y.data(), &scratch);
  EXPECT_TRUE(absl::IsInvalidArgument(s)) << s;
  s = cpu_ops::DirectConvBackwardData(g, 2, y.data(), nullptr, x.data(),
                                      &scratch);
  EXPECT_TRUE(absl::IsInvalidArgument(s)) << s;
  s = cpu_ops::DirectConvBackwardFilter(g, 2, x.data(), nullptr, k.data(),
                                        &scratch);
  EXPECT_TRUE(absl::IsInvalidArgument(s)) << s;
  g.stride_width = 0;
  s = cpu_ops::DirectConvForward(g, 2, x.data(), k.data(), y.data(), &scratch);
  EXPECT_TRUE(absl::IsInvalidArgument(s)) << s;
  for (float v : y) EXPECT_EQ(v, 5.0f);
  for (float v : x) EXPECT_EQ(v, 1.0f);
  for (float v : k) EXPECT_EQ(v, 1.0f);
}

}  // namespace
}  // namespace lockstep
