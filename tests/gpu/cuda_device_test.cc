// The CUDA device against the CPU device and against hand-computed results.
//
// Every test that needs a GPU skips itself (GTEST_SKIP) when none is
// visible, so this binary builds, runs and reports "skipped" on machines
// without one. The exact checks run on both devices (parameter "cpu" /
// "cuda"); the comparisons feed both the same random non-zero data of odd
// sizes (not multiples of 32, so every kernel's edge cases run) and require
// the CUDA results within 1e-5 of the CPU's, relative to the largest
// magnitude of the result.
#include "worker/device/cuda/cuda_device.h"

#include <algorithm>
#include <cmath>
#include <cstdint>
#include <memory>
#include <string>
#include <utility>
#include <vector>

#include "absl/strings/str_cat.h"
#include "absl/strings/str_format.h"
#include "gmock/gmock.h"
#include "gtest/gtest.h"
#include "tests/gpu/cuda_test_util.h"
#include "worker/device/cpu/cpu_device.h"
#include "worker/device/device_factory.h"

namespace lockstep {
namespace {

using ::testing::HasSubstr;

using cuda_test::CudaVsCpuTest;
using cuda_test::Download;
using cuda_test::ExpectClose;
using cuda_test::kNeedsAGpu;
using cuda_test::kTolerance;
using cuda_test::RandomFloats;
using cuda_test::RandomLabels;
using cuda_test::Upload;

// ---------------------------------------------------------------------------
// Exact checks, run on both devices.

using cuda_test::DeviceTest;

TEST_P(DeviceTest, AllocationsAreZeroed) {
  auto buffer = device_->Allocate(1001 * sizeof(float));
  ASSERT_TRUE(buffer.ok()) << buffer.status();
  EXPECT_EQ(Download<float>(*device_, **buffer),
            std::vector<float>(1001, 0.0f));
  auto host = device_->AllocateHost(1001);
  ASSERT_TRUE(host.ok()) << host.status();
  ASSERT_EQ((*host)->bytes(), 1001u);
  const auto* bytes = (*host)->As<unsigned char>();
  EXPECT_TRUE(std::all_of(bytes, bytes + 1001, [](int b) { return b == 0; }));
}

TEST_P(DeviceTest, GemmExactOnSmallIntegers) {
  // [1 2 3; 4 5 6] . [1 0; 0 1; 1 1] = [4 5; 10 11], exact in float.
  auto a = Upload<float>(*device_, {1, 2, 3, 4, 5, 6});
  auto b = Upload<float>(*device_, {1, 0, 0, 1, 1, 1});
  auto c = Upload<float>(*device_, {100, 200, 300, 400});
  ASSERT_TRUE(device_
                  ->Gemm(false, false, 2, 2, 3, 1.0f, a->As<float>(),
                         b->As<float>(), 0.0f, c->As<float>())
                  .ok());
  EXPECT_EQ(Download<float>(*device_, *c), (std::vector<float>{4, 5, 10, 11}));
  // Both transposed, operands swapped: b^T . a^T = (a . b)^T =
  // [4 10; 5 11], with beta = 1 adding the old c.
  ASSERT_TRUE(device_
                  ->Gemm(true, true, 2, 2, 3, 1.0f, b->As<float>(),
                         a->As<float>(), 1.0f, c->As<float>())
                  .ok());
  EXPECT_EQ(Download<float>(*device_, *c), (std::vector<float>{8, 15, 15, 22}));
}

TEST_P(DeviceTest, ElementwiseOpsExact) {
  auto x = Upload<float>(*device_, {1, 2, 3, 4, 5, 6});
  auto bias = Upload<float>(*device_, {10, -20, 0.5f});
  ASSERT_TRUE(device_->AddBias(2, 3, bias->As<float>(), x->As<float>()).ok());
  EXPECT_EQ(Download<float>(*device_, *x),
            (std::vector<float>{11, -18, 3.5f, 14, -15, 6.5f}));

  auto act = Upload<float>(*device_, {-2.0f, 0.0f, 3.0f, -0.5f, 7.25f});
  ASSERT_TRUE(device_->ReluForward(5, act->As<float>()).ok());
  EXPECT_EQ(Download<float>(*device_, *act),
            (std::vector<float>{0.0f, 0.0f, 3.0f, 0.0f, 7.25f}));
  auto grad = Upload<float>(*device_, {1.0f, 2.0f, 3.0f, 4.0f, -5.0f});
  ASSERT_TRUE(
      device_->ReluBackward(5, act->As<float>(), grad->As<float>()).ok());
  EXPECT_EQ(Download<float>(*device_, *grad),
            (std::vector<float>{0.0f, 0.0f, 3.0f, 0.0f, -5.0f}));

  // Into another buffer, leaving the input alone.
  auto in = Upload<float>(*device_, {-1.5f, 2.0f, 0.0f, 4.0f, -0.25f});
  auto out = Upload<float>(*device_, {9, 9, 9, 9, 9});
  ASSERT_TRUE(
      device_->ReluForwardInto(5, in->As<float>(), out->As<float>()).ok());
  EXPECT_EQ(Download<float>(*device_, *out),
            (std::vector<float>{0.0f, 2.0f, 0.0f, 4.0f, 0.0f}));
  EXPECT_EQ(Download<float>(*device_, *in),
            (std::vector<float>{-1.5f, 2.0f, 0.0f, 4.0f, -0.25f}));
  auto dy = Upload<float>(*device_, {1.0f, -2.0f, 3.0f, 4.5f, 5.0f});
  auto dx = Upload<float>(*device_, {9, 9, 9, 9, 9});
  ASSERT_TRUE(device_
                  ->ReluBackwardInto(5, out->As<float>(), dy->As<float>(),
                                     dx->As<float>())
                  .ok());
  EXPECT_EQ(Download<float>(*device_, *dx),
            (std::vector<float>{0.0f, -2.0f, 0.0f, 4.5f, 0.0f}));
  EXPECT_EQ(Download<float>(*device_, *dy),
            (std::vector<float>{1.0f, -2.0f, 3.0f, 4.5f, 5.0f}));

  auto rows = Upload<float>(*device_, {1, 2, 3, 10, 20, 30, -1, 0.5f, 0});
  auto sums = Upload<float>(*device_, {99, 99, 99});  // Overwritten.
  ASSERT_TRUE(
      device_->BiasGradient(3, 3, rows->As<float>(), sums->As<float>()).ok());
  EXPECT_EQ(Download<float>(*device_, *sums),
            (std::vector<float>{10, 22.5f, 33}));
}

TEST_P(DeviceTest, SoftmaxCrossEntropyHandComputed) {
  // Row 0: logits {1, 2, 3}, label 2. Row 1: {1000, 1000, -1000}, label 0:
  // huge but stable, and a tie that goes to the lower index.
  auto logits = Upload<float>(*device_, {1, 2, 3, 1000, 1000, -1000});
  auto labels = Upload<int32_t>(*device_, {2, 0});
  auto grad = Upload<float>(*device_, std::vector<float>(6, 123.0f));
  double loss = 0.5;  // Added to, not overwritten.
  int64_t correct = 1;
  ASSERT_TRUE(device_
                  ->SoftmaxCrossEntropy(2, 3, logits->As<float>(),
                                        labels->As<int32_t>(), 0.5f,
                                        grad->As<float>(), &loss, &correct)
                  .ok());
  const double z = std::exp(1.0) + std::exp(2.0) + std::exp(3.0);
  EXPECT_NEAR(loss, 0.5 + (std::log(z) - 3.0) + std::log(2.0), 1e-6);
  EXPECT_EQ(correct, 1 + 2);
  const std::vector<float> g = Download<float>(*device_, *grad);
  const double p[3] = {std::exp(1.0) / z, std::exp(2.0) / z, std::exp(3.0) / z};
  EXPECT_NEAR(g[0], 0.5 * p[0], 1e-7);
  EXPECT_NEAR(g[1], 0.5 * p[1], 1e-7);
  EXPECT_NEAR(g[2], 0.5 * (p[2] - 1.0), 1e-7);
  EXPECT_NEAR(g[3], 0.5 * (0.5 - 1.0), 1e-7);
  EXPECT_NEAR(g[4], 0.5 * 0.5, 1e-7);
  EXPECT_NEAR(g[5], 0.0, 1e-7);

  // Without a gradient: all ties, so index 0 wins, not the label 3.
  auto zeros = Upload<float>(*device_, {0, 0, 0, 0});
  auto three = Upload<int32_t>(*device_, {3});
  loss = 0;
  correct = 0;
  ASSERT_TRUE(device_
                  ->SoftmaxCrossEntropy(1, 4, zeros->As<float>(),
                                        three->As<int32_t>(), 1.0f, nullptr,
                                        &loss, &correct)
                  .ok());
  EXPECT_NEAR(loss, std::log(4.0), 1e-12);
  EXPECT_EQ(correct, 0);
}

TEST_P(DeviceTest, SoftmaxCrossEntropyRejectsBadLabelsAndWritesNothing) {
  auto logits = Upload<float>(*device_, {1, 2, 3, 4, 5, 6, 7, 8, 9});
  for (int32_t bad : {-1, 3, 1000}) {
    auto labels = Upload<int32_t>(*device_, {1, bad, -7});
    auto grad = Upload<float>(*device_, std::vector<float>(9, 7.0f));
    double loss = 0;
    int64_t correct = 0;
    const absl::Status status = device_->SoftmaxCrossEntropy(
        3, 3, logits->As<float>(), labels->As<int32_t>(), 1.0f,
        grad->As<float>(), &loss, &correct);
    EXPECT_EQ(status.code(), absl::StatusCode::kInvalidArgument) << bad;
    // The first bad row is named.
    EXPECT_THAT(std::string(status.message()),
                HasSubstr(absl::StrCat("label ", bad, " of row 1")));
    EXPECT_EQ(loss, 0.0);
    EXPECT_EQ(correct, 0);
    EXPECT_EQ(Download<float>(*device_, *grad), std::vector<float>(9, 7.0f));
  }
  // The device still works afterwards.
  auto labels = Upload<int32_t>(*device_, {0, 1, 2});
  double loss = 0;
  int64_t correct = 0;
  EXPECT_TRUE(device_
                  ->SoftmaxCrossEntropy(3, 3, logits->As<float>(),
                                        labels->As<int32_t>(), 1.0f, nullptr,
                                        &loss, &correct)
                  .ok());
  EXPECT_EQ(correct, 1);
}

TEST_P(DeviceTest, EmptyShapesAreNoOpsAndNegativeOnesAreRejected) {
  float* none = nullptr;
  EXPECT_TRUE(
      device_->Gemm(false, false, 0, 5, 3, 1, none, none, 0, none).ok());
  EXPECT_TRUE(device_->AddBias(0, 4, none, none).ok());
  EXPECT_TRUE(device_->ReluForward(0, none).ok());
  EXPECT_TRUE(device_->ReluBackward(0, none, none).ok());
  EXPECT_TRUE(device_->ReluForwardInto(0, none, none).ok());
  EXPECT_TRUE(device_->ReluBackwardInto(0, none, none, none).ok());
  double loss = 0;
  int64_t correct = 0;
  EXPECT_TRUE(device_
                  ->SoftmaxCrossEntropy(0, 3, none, nullptr, 1.0f, none, &loss,
                                        &correct)
                  .ok());
  EXPECT_TRUE(device_->CopyToHostAsync(none, none, 0).ok());
  EXPECT_EQ(
      device_->Gemm(false, false, -1, 1, 1, 1, none, none, 0, none).code(),
      absl::StatusCode::kInvalidArgument);
  EXPECT_EQ(device_->AddBias(-1, 1, none, none).code(),
            absl::StatusCode::kInvalidArgument);
  EXPECT_TRUE(device_->Synchronize().ok());
}

INSTANTIATE_TEST_SUITE_P(BothDevices, DeviceTest,
                         ::testing::Values("cpu", "cuda"),
                         [](const auto& info) { return info.param; });

// ---------------------------------------------------------------------------
// The CUDA device against the CPU device on random data.

// Runs one Gemm on `device` from host data; returns c.
std::vector<float> RunGemm(Device& device, bool trans_a, bool trans_b, int m,
                           int n, int k, float alpha,
                           const std::vector<float>& a,
                           const std::vector<float>& b, float beta,
                           const std::vector<float>& c) {
  auto da = Upload(device, a);
  auto db = Upload(device, b);
  auto dc = Upload(device, c);
  EXPECT_TRUE(device
                  .Gemm(trans_a, trans_b, m, n, k, alpha, da->As<float>(),
                        db->As<float>(), beta, dc->As<float>())
                  .ok());
  return Download<float>(device, *dc);
}

TEST_F(CudaVsCpuTest, NameSaysCudaAndFp32) {
  EXPECT_THAT(cuda_->Name(), HasSubstr("cuda:0"));
  EXPECT_THAT(cuda_->Name(), HasSubstr("fp32"));
}

TEST_F(CudaVsCpuTest, GemmAllTransposesOddSizes) {
  struct Shape {
    int m, n, k;
  };
  for (const Shape s : {Shape{37, 53, 71}, Shape{129, 67, 257},
                        Shape{1, 45, 13}, Shape{61, 1, 99}}) {
    const std::vector<float> a = RandomFloats(size_t{1} * s.m * s.k, 11);
    const std::vector<float> b = RandomFloats(size_t{1} * s.k * s.n, 12);
    const std::vector<float> c = RandomFloats(size_t{1} * s.m * s.n, 13);
    for (int t = 0; t < 4; ++t) {
      const bool ta = t & 1, tb = t & 2;
      for (const auto& [alpha, beta] :
           {std::pair{1.0f, 0.0f}, std::pair{-0.75f, 0.5f}}) {
        ExpectClose(
            RunGemm(*cuda_, ta, tb, s.m, s.n, s.k, alpha, a, b, beta, c),
            RunGemm(*cpu_, ta, tb, s.m, s.n, s.k, alpha, a, b, beta, c),
            absl::StrFormat("gemm %dx%dx%d ta=%d tb=%d alpha=%g", s.m, s.n, s.k,
                            ta, tb, alpha));
      }
    }
  }
}

TEST_F(CudaVsCpuTest, ElementwiseOpsOddSizes) {
  const int rows = 45, cols = 77;
  const size_t n = size_t{rows} * cols;
  const std::vector<float> x = RandomFloats(n, 21);
  const std::vector<float> bias = RandomFloats(cols, 22);
  const std::vector<float> upstream = RandomFloats(n, 23);
  std::vector<std::vector<float>> results[2];
  Device* devices[2] = {cpu_.get(), cuda_.get()};
  for (int d = 0; d < 2; ++d) {
    Device& device = *devices[d];
    auto dx = Upload(device, x);
    auto db = Upload(device, bias);
    auto dg = Upload(device, upstream);
    auto dbias_grad = Upload(device, std::vector<float>(cols, 5.0f));
    ASSERT_TRUE(
        device.AddBias(rows, cols, db->As<float>(), dx->As<float>()).ok());
    results[d].push_back(Download<float>(device, *dx));
    ASSERT_TRUE(device.ReluForward(n, dx->As<float>()).ok());
    results[d].push_back(Download<float>(device, *dx));
    ASSERT_TRUE(device.ReluBackward(n, dx->As<float>(), dg->As<float>()).ok());
    results[d].push_back(Download<float>(device, *dg));
    ASSERT_TRUE(
        device
            .BiasGradient(rows, cols, dg->As<float>(), dbias_grad->As<float>())
            .ok());
    results[d].push_back(Download<float>(device, *dbias_grad));
  }
  const char* names[] = {"add_bias", "relu_forward", "relu_backward",
                         "bias_gradient"};
  for (int i = 0; i < 4; ++i) {
    ExpectClose(results[1][i], results[0][i], names[i]);
  }
  // The element-wise ops are exact.
  for (int i = 0; i < 3; ++i) EXPECT_EQ(results[1][i], results[0][i]);
}

TEST_F(CudaVsCpuTest, SoftmaxCrossEntropyOddAndWideRows) {
  for (const int cols : {13, 1001}) {
    const int rows = 61;
    const std::vector<float> logits =
        RandomFloats(size_t{rows} * cols, 31 + cols, -4.0f, 4.0f);
    const std::vector<int32_t> labels = RandomLabels(rows, cols, 32);
    double loss[2] = {0, 0};
    int64_t correct[2] = {0, 0};
    std::vector<float> grad[2];
    Device* devices[2] = {cpu_.get(), cuda_.get()};
    for (int d = 0; d < 2; ++d) {
      auto dl = Upload(*devices[d], logits);
      auto dy = Upload(*devices[d], labels);
      auto dg = Upload(*devices[d], std::vector<float>(logits.size()));
      ASSERT_TRUE(devices[d]
                      ->SoftmaxCrossEntropy(
                          rows, cols, dl->As<float>(), dy->As<int32_t>(),
                          1.0f / rows, dg->As<float>(), &loss[d], &correct[d])
                      .ok());
      grad[d] = Download<float>(*devices[d], *dg);
    }
    EXPECT_NEAR(loss[1], loss[0], kTolerance * loss[0]) << cols;
    EXPECT_EQ(correct[1], correct[0]) << cols;
    ExpectClose(grad[1], grad[0], absl::StrCat("softmax grad, cols ", cols));
  }
}

TEST_F(CudaVsCpuTest, Tf32IsOptInAndClose) {
  auto tf32 = CreateCudaDevice(0, /*tf32=*/true);
  ASSERT_TRUE(tf32.ok()) << tf32.status();
  EXPECT_THAT((*tf32)->Name(), HasSubstr("TF32"));
  const int m = 97, n = 83, k = 301;
  const std::vector<float> a = RandomFloats(size_t{m} * k, 61);
  const std::vector<float> b = RandomFloats(size_t{k} * n, 62);
  const std::vector<float> c(size_t{m} * n, 0.0f);
  // TF32 keeps 10 mantissa bits: close, but not to fp32's 1e-5.
  ExpectClose(RunGemm(**tf32, false, false, m, n, k, 1.0f, a, b, 0.0f, c),
              RunGemm(*cpu_, false, false, m, n, k, 1.0f, a, b, 0.0f, c),
              "tf32 gemm", 1e-2);
}

TEST_F(CudaVsCpuTest, ErrorsCarryTheCallFileAndLine) {
  // Far more than any GPU has.
  auto huge = cuda_->Allocate(size_t{1} << 52);
  ASSERT_FALSE(huge.ok());
  EXPECT_EQ(huge.status().code(), absl::StatusCode::kResourceExhausted);
  EXPECT_THAT(std::string(huge.status().message()), HasSubstr("cudaMalloc"));
  EXPECT_THAT(std::string(huge.status().message()),
              HasSubstr("worker/device/cuda/cuda_resources.cc:"));
  // Reported once: the next launches do not see it again.
  auto x = Upload<float>(*cuda_, {-1.0f, 2.0f});
  EXPECT_TRUE(cuda_->ReluForward(2, x->As<float>()).ok());
  EXPECT_EQ(Download<float>(*cuda_, *x), (std::vector<float>{0.0f, 2.0f}));
}

TEST_F(CudaVsCpuTest, FactoryPicksTheGpuAndChecksTheOrdinal) {
  DeviceOptions options;
  options.kind = "auto";
  auto automatic = CreateDevice(options);
  ASSERT_TRUE(automatic.ok()) << automatic.status();
  EXPECT_THAT((*automatic)->Name(), HasSubstr("cuda:0"));
  options.kind = "cuda";
  options.gpu = CudaDeviceCount();
  EXPECT_EQ(CreateDevice(options).status().code(),
            absl::StatusCode::kInvalidArgument);
}

// ---------------------------------------------------------------------------
// Without a GPU: a clear refusal, never a crash. Runs everywhere else.

TEST(CudaWithoutGpuTest, CudaIsAClearFailedPrecondition) {
  if (CudaDeviceCount() > 0) GTEST_SKIP() << "a CUDA GPU is visible";
  auto device = CreateCudaDevice(0, false);
  EXPECT_EQ(device.status().code(), absl::StatusCode::kFailedPrecondition);
  EXPECT_THAT(std::string(device.status().message()),
              HasSubstr("no CUDA GPU is visible"));
  DeviceOptions options;
  options.kind = "cuda";
  EXPECT_EQ(CreateDevice(options).status().code(),
            absl::StatusCode::kFailedPrecondition);
  options.kind = "auto";
  auto automatic = CreateDevice(options);
  ASSERT_TRUE(automatic.ok()) << automatic.status();
  EXPECT_THAT((*automatic)->Name(), HasSubstr("cpu"));
}

}  // namespace
}  // namespace lockstep
