#include "worker/device/cpu/cpu_device.h"

#include <cmath>
#include <cstdint>
#include <cstring>
#include <limits>
#include <memory>
#include <string>
#include <vector>

#include "gmock/gmock.h"
#include "gtest/gtest.h"
#include "tests/unit/random_floats.h"
#include "worker/device/cpu/cpu_conv.h"

namespace lockstep {
namespace {

using ::testing::HasSubstr;

// c = alpha * op(a) * op(b) + beta * c in double, straight from the
// definition, with the stored matrices row-major.
std::vector<double> ReferenceGemm(bool trans_a, bool trans_b, int m, int n,
                                  int k, double alpha,
                                  const std::vector<float>& a,
                                  const std::vector<float>& b, double beta,
                                  const std::vector<float>& c) {
  std::vector<double> out(static_cast<size_t>(m) * n);
  for (int i = 0; i < m; ++i) {
    for (int j = 0; j < n; ++j) {
      double sum = 0.0;
      for (int p = 0; p < k; ++p) {
        const double av = trans_a ? a[p * m + i] : a[i * k + p];
        const double bv = trans_b ? b[j * k + p] : b[p * n + j];
        sum += av * bv;
      }
      out[i * n + j] = alpha * sum + beta * c[i * n + j];
    }
  }
  return out;
}

class CpuDeviceTest : public ::testing::Test {
 protected:
  std::unique_ptr<Device> device_ = CpuDevice::Create(1);
};

TEST_F(CpuDeviceTest, NameMentionsOpenBlasAndTheConvolutions) {
  const std::string one = cpu_ops::DirectConvAvailable()
                              ? "cpu (OpenBLAS, 1 thread, AVX-512 convolutions)"
                              : "cpu (OpenBLAS, 1 thread)";
  EXPECT_EQ(device_->Name(), one);
  EXPECT_EQ(CpuDevice::Create(0)->Name(), one);
  EXPECT_EQ(CpuDevice::Create(1, CpuConv::kIm2Col)->Name(),
            "cpu (OpenBLAS, 1 thread)");
  if (cpu_ops::DirectConvAvailable()) {
    EXPECT_EQ(CpuDevice::Create(2, CpuConv::kDirect)->Name(),
              "cpu (OpenBLAS, 2 threads, AVX-512 convolutions only)");
  }
  EXPECT_EQ(CpuDevice::Create(2)->Name(),
            cpu_ops::DirectConvAvailable()
                ? "cpu (OpenBLAS, 2 threads, AVX-512 convolutions)"
                : "cpu (OpenBLAS, 2 threads)");
}

// Where the direct kernels win (measured, see HasDirectConv): everywhere
// but a single output pixel whose window's taps inside the image hold more
// than 4 MiB of kernel; never with them off, always with kDirect.
TEST_F(CpuDeviceTest, DirectConvolutionWhereItWins) {
  if (!cpu_ops::DirectConvAvailable()) GTEST_SKIP() << "no AVX-512F here";
  WindowGeometry g;
  g.input = {32, 8, 8, 64};
  g.window_height = g.window_width = 3;
  g.pad_top = g.pad_left = 1;
  g.out_height = g.out_width = 8;
  EXPECT_TRUE(device_->HasDirectConv(g, 64));
  EXPECT_TRUE(device_->HasDirectConv(g, 4096));  // Kernel size: no matter.
  // A 1x1 map: 3x3 window, padding 1 -> only the centre tap is inside.
  WindowGeometry one = g;
  one.input = {32, 1, 1, 512};
  one.out_height = one.out_width = 1;
  EXPECT_TRUE(device_->HasDirectConv(one, 2048));  // 512*2048*4 = 4 MiB
  EXPECT_FALSE(device_->HasDirectConv(one, 2049));
  // 2x2 input, 3x3 window, no padding on the top and left: 2 x 2 taps.
  one.input = {32, 2, 2, 256};
  one.pad_top = one.pad_left = 0;
  EXPECT_TRUE(device_->HasDirectConv(one, 1024));  // 4*256*1024*4 = 4 MiB
  EXPECT_FALSE(device_->HasDirectConv(one, 1025));
  auto im2col = CpuDevice::Create(1, CpuConv::kIm2Col);
  EXPECT_FALSE(im2col->HasDirectConv(g, 64));
  EXPECT_TRUE(
      CpuDevice::Create(1, CpuConv::kDirect)->HasDirectConv(one, 65536));
  std::vector<float> x(g.input.Size(), 1.0f), k(g.PatchSize() * 64, 1.0f);
  std::vector<float> y(g.OutputPixels() * 64, 3.0f);
  EXPECT_EQ(im2col->ConvForward(g, 64, x.data(), k.data(), y.data()).code(),
            absl::StatusCode::kUnimplemented);
  EXPECT_EQ(y[0], 3.0f);
  ASSERT_TRUE(device_->ConvForward(g, 64, x.data(), k.data(), y.data()).ok());
  EXPECT_EQ(y[0], 4 * 64.0f);       // A corner: 2 x 2 pixels inside.
  EXPECT_EQ(y[9 * 64], 9 * 64.0f);  // Pixel (1, 1): the whole window.
}

TEST_F(CpuDeviceTest, AllocateIsZeroedAndAligned) {
  auto buffer = device_->Allocate(1000);
  ASSERT_TRUE(buffer.ok()) << buffer.status();
  EXPECT_EQ((*buffer)->bytes(), 1000u);
  EXPECT_EQ(reinterpret_cast<uintptr_t>((*buffer)->data()) % 64, 0u);
  const auto* bytes = (*buffer)->As<unsigned char>();
  for (int i = 0; i < 1000; ++i) ASSERT_EQ(bytes[i], 0) << i;

  auto empty = device_->Allocate(0);
  ASSERT_TRUE(empty.ok()) << empty.status();
  EXPECT_EQ((*empty)->bytes(), 0u);
}

TEST_F(CpuDeviceTest, CopiesRoundTrip) {
  const std::vector<float> host = {1.5f, -2.0f, 3.25f};
  auto buffer = device_->Allocate(host.size() * sizeof(float));
  ASSERT_TRUE(buffer.ok());
  ASSERT_TRUE(device_
                  ->CopyToDevice(host.data(), (*buffer)->data(),
                                 host.size() * sizeof(float))
                  .ok());
  std::vector<float> back(host.size());
  ASSERT_TRUE(device_
                  ->CopyToHost((*buffer)->data(), back.data(),
                               host.size() * sizeof(float))
                  .ok());
  EXPECT_EQ(back, host);
  EXPECT_TRUE(device_->Synchronize().ok());
}

struct GemmCase {
  bool trans_a;
  bool trans_b;
};

class GemmTest : public CpuDeviceTest,
                 public ::testing::WithParamInterface<GemmCase> {};

TEST_P(GemmTest, MatchesDoubleLoops) {
  const auto [trans_a, trans_b] = GetParam();
  const int m = 3, n = 5, k = 7;
  const std::vector<float> a = RandomFloats(m * k, 1);
  const std::vector<float> b = RandomFloats(k * n, 2);
  const std::vector<float> c0 = RandomFloats(m * n, 3);
  struct Scalars {
    float alpha;
    float beta;
  };
  for (const Scalars& s :
       {Scalars{1.0f, 0.0f}, Scalars{0.5f, 0.25f}, Scalars{-2.0f, 1.0f}}) {
    std::vector<float> c = c0;
    ASSERT_TRUE(device_
                    ->Gemm(trans_a, trans_b, m, n, k, s.alpha, a.data(),
                           b.data(), s.beta, c.data())
                    .ok());
    const std::vector<double> want =
        ReferenceGemm(trans_a, trans_b, m, n, k, s.alpha, a, b, s.beta, c0);
    for (int i = 0; i < m * n; ++i) {
      EXPECT_NEAR(c[i], want[i], 1e-5)
          << "i=" << i << " alpha=" << s.alpha << " beta=" << s.beta;
    }
  }
}

INSTANTIATE_TEST_SUITE_P(AllTransposes, GemmTest,
                         ::testing::Values(GemmCase{false, false},
                                           GemmCase{false, true},
                                           GemmCase{true, false},
                                           GemmCase{true, true}));

TEST_F(CpuDeviceTest, GemmExactOnSmallIntegers) {
  // [1 2 3; 4 5 6] . [1 0; 0 1; 1 1] = [4 5; 10 11], exact in float.
  const std::vector<float> a = {1, 2, 3, 4, 5, 6};
  const std::vector<float> b = {1, 0, 0, 1, 1, 1};
  std::vector<float> c = {100, 200, 300, 400};
  ASSERT_TRUE(device_
                  ->Gemm(false, false, 2, 2, 3, 1.0f, a.data(), b.data(), 0.0f,
                         c.data())
                  .ok());
  EXPECT_EQ(c, (std::vector<float>{4, 5, 10, 11}));
  // beta = 1 accumulates: c = 2 * ab + c.
  ASSERT_TRUE(device_
                  ->Gemm(false, false, 2, 2, 3, 2.0f, a.data(), b.data(), 1.0f,
                         c.data())
                  .ok());
  EXPECT_EQ(c, (std::vector<float>{12, 15, 30, 33}));
}

TEST_F(CpuDeviceTest, GemmRejectsNegativeSizes) {
  float x = 0;
  EXPECT_EQ(
      device_->Gemm(false, false, -1, 1, 1, 1.0f, &x, &x, 0.0f, &x).code(),
      absl::StatusCode::kInvalidArgument);
}

// The image ops compute window positions in int (as the CUDA element
// functions do): a geometry whose last window starts past INT_MAX, or whose
// padding pushes image rows past it, is refused before anything is read.
TEST_F(CpuDeviceTest, ImageOpsRefuseWindowPositionsPastInt) {
  WindowGeometry wide;
  wide.input = {1, 1, 1, 1};
  wide.stride_width = 1 << 16;
  wide.out_height = 1;
  wide.out_width = (1 << 16) + 1;
  WindowGeometry padded;
  padded.input = {1, 2, 1, 1};
  padded.pad_top = std::numeric_limits<int>::max() - 1;
  padded.out_height = 1;
  padded.out_width = 1;
  for (const WindowGeometry& g : {wide, padded}) {
    std::vector<float> out(g.OutputPixels(), 7.0f);
    std::vector<int32_t> argmax(g.OutputPixels(), -1);
    float x[2] = {3.0f, 4.0f};
    for (const absl::Status& s :
         {device_->Im2Col(g, x, out.data()), device_->Col2Im(g, out.data(), x),
          device_->MaxPoolForward(g, x, out.data(), argmax.data()),
          device_->MaxPoolBackward(g, out.data(), argmax.data(), x)}) {
      EXPECT_EQ(s.code(), absl::StatusCode::kInvalidArgument) << s;
      EXPECT_THAT(s.message(), HasSubstr("window positions out of range"));
    }
    EXPECT_EQ(out[0], 7.0f);
    EXPECT_EQ(argmax[0], -1);
    EXPECT_EQ(x[0], 3.0f);
  }
}

TEST_F(CpuDeviceTest, AddBias) {
  std::vector<float> x = {1, 2, 3, 4, 5, 6};
  const std::vector<float> bias = {10, -20, 0.5f};
  ASSERT_TRUE(device_->AddBias(2, 3, bias.data(), x.data()).ok());
  EXPECT_EQ(x, (std::vector<float>{11, -18, 3.5f, 14, -15, 6.5f}));
}

TEST_F(CpuDeviceTest, ReluForwardAndBackward) {
  std::vector<float> x = {-2.0f, 0.0f, 3.0f, -0.5f, 7.25f};
  ASSERT_TRUE(device_->ReluForward(x.size(), x.data()).ok());
  EXPECT_EQ(x, (std::vector<float>{0.0f, 0.0f, 3.0f, 0.0f, 7.25f}));

  // The gradient passes only where the output is positive; zero output
  // (including exactly 0 input) blocks it.
  std::vector<float> grad = {1.0f, 2.0f, 3.0f, 4.0f, -5.0f};
  ASSERT_TRUE(device_->ReluBackward(x.size(), x.data(), grad.data()).ok());
  EXPECT_EQ(grad, (std::vector<float>{0.0f, 0.0f, 3.0f, 0.0f, -5.0f}));
}

// The one-pass forms give the bits of a copy followed by the in-place op
// (the base class's way, which CUDA uses), into another buffer or in place.
TEST_F(CpuDeviceTest, ReluIntoMatchesCopyThenInPlace) {
  std::vector<float> x = RandomFloats(1001, 31);
  for (int i = 0; i < 1001; i += 7) x[i] = i % 2 ? 0.0f : -0.0f;
  const std::vector<float> dy = RandomFloats(1001, 32);
  std::vector<float> want_y = x, y(x.size(), 9.0f);
  ASSERT_TRUE(device_->ReluForward(want_y.size(), want_y.data()).ok());
  ASSERT_TRUE(device_->ReluForwardInto(x.size(), x.data(), y.data()).ok());
  EXPECT_EQ(y, want_y);
  std::vector<float> want_dx = dy, dx(dy.size(), 9.0f);
  ASSERT_TRUE(
      device_->ReluBackward(want_dx.size(), y.data(), want_dx.data()).ok());
  ASSERT_TRUE(
      device_->ReluBackwardInto(dy.size(), y.data(), dy.data(), dx.data())
          .ok());
  EXPECT_EQ(dx, want_dx);
  std::vector<float> in_place = dy;
  ASSERT_TRUE(device_
                  ->ReluBackwardInto(dy.size(), y.data(), in_place.data(),
                                     in_place.data())
                  .ok());
  EXPECT_EQ(in_place, want_dx);
  EXPECT_FALSE(device_->ReluForwardInto(3, nullptr, y.data()).ok());
  EXPECT_FALSE(device_->ReluBackwardInto(3, y.data(), nullptr, dx.data()).ok());
  EXPECT_TRUE(device_->ReluBackwardInto(0, nullptr, nullptr, nullptr).ok());
}

TEST_F(CpuDeviceTest, BiasGradientSumsColumns) {
  const std::vector<float> grad = {1, 2, 3, 10, 20, 30, -1, 0.5f, 0};
  std::vector<float> bias_grad = {99, 99, 99};  // Overwritten, not added to.
  ASSERT_TRUE(device_->BiasGradient(3, 3, grad.data(), bias_grad.data()).ok());
  EXPECT_EQ(bias_grad, (std::vector<float>{10, 22.5f, 33}));
}

TEST_F(CpuDeviceTest, SoftmaxCrossEntropyHandComputed) {
  // Row 0: logits {1, 2, 3}, label 2. Row 1: logits {1000, 1000, -1000},
  // label 0 -- huge but stable -- and a tie that goes to the lower index.
  const std::vector<float> logits = {1, 2, 3, 1000, 1000, -1000};
  const std::vector<int32_t> labels = {2, 0};
  std::vector<float> grad(6, 123.0f);
  double loss = 0.5;  // Added to, not overwritten.
  int64_t correct = 1;
  ASSERT_TRUE(device_
                  ->SoftmaxCrossEntropy(2, 3, logits.data(), labels.data(),
                                        0.5f, grad.data(), &loss, &correct)
                  .ok());
  const double z = std::exp(1.0) + std::exp(2.0) + std::exp(3.0);
  const double loss0 = std::log(z) - 3.0;
  const double loss1 = std::log(2.0);
  EXPECT_NEAR(loss, 0.5 + loss0 + loss1, 1e-6);
  EXPECT_EQ(correct, 1 + 2);  // Row 0 arg-max 2; row 1 tie -> index 0.

  const double p0[3] = {std::exp(1.0) / z, std::exp(2.0) / z,
                        std::exp(3.0) / z};
  EXPECT_NEAR(grad[0], 0.5 * p0[0], 1e-7);
  EXPECT_NEAR(grad[1], 0.5 * p0[1], 1e-7);
  EXPECT_NEAR(grad[2], 0.5 * (p0[2] - 1.0), 1e-7);
  EXPECT_NEAR(grad[3], 0.5 * (0.5 - 1.0), 1e-7);
  EXPECT_NEAR(grad[4], 0.5 * 0.5, 1e-7);
  EXPECT_NEAR(grad[5], 0.0, 1e-7);
}

TEST_F(CpuDeviceTest, SoftmaxCrossEntropyWithoutGradient) {
  const std::vector<float> logits = {0, 0, 0, 0};
  const std::vector<int32_t> labels = {3};
  double loss = 0;
  int64_t correct = 0;
  ASSERT_TRUE(device_
                  ->SoftmaxCrossEntropy(1, 4, logits.data(), labels.data(),
                                        1.0f, nullptr, &loss, &correct)
                  .ok());
  EXPECT_NEAR(loss, std::log(4.0), 1e-12);
  EXPECT_EQ(correct, 0);  // All tie; index 0 wins, not the label 3.
}

TEST_F(CpuDeviceTest, SoftmaxCrossEntropyRejectsBadLabels) {
  const std::vector<float> logits = {1, 2, 3, 4, 5, 6};
  std::vector<float> grad(6, 7.0f);
  for (int32_t bad : {-1, 3, 1000}) {
    const std::vector<int32_t> labels = {1, bad};
    double loss = 0;
    int64_t correct = 0;
    const absl::Status status = device_->SoftmaxCrossEntropy(
        2, 3, logits.data(), labels.data(), 1.0f, grad.data(), &loss, &correct);
    EXPECT_EQ(status.code(), absl::StatusCode::kInvalidArgument) << bad;
    EXPECT_THAT(std::string(status.message()), HasSubstr("label"));
    // Nothing is written for a rejected batch.
    EXPECT_EQ(loss, 0.0);
    EXPECT_EQ(correct, 0);
    EXPECT_EQ(grad, std::vector<float>(6, 7.0f));
  }
}

}  // namespace
}  // namespace lockstep
