// The CUDA device's kernels (worker/device/cuda/*.cu, the very files nvcc
// compiles for the GPU) run on the CPU through the CUDA emulation of
// tests/cuda_emulation, against the CPU device's implementations: every
// machine, with or without a GPU, runs this. The element-wise ops and the
// image ops must agree bit for bit; sums taken in another order (the
// kernels reduce in double, in tiles) within rounding. On a GPU, nvcc's
// fused multiply-adds and CUDA's expf add last-bit differences that the
// GPU tests (tests/gpu) allow for. The kernels' operands are device memory
// (cudaMalloc'd, which host code cannot touch here, as on a GPU), copied in
// and out with cudaMemcpy.
#include <cuda_runtime_api.h>

#include <cmath>
#include <cstdint>
#include <memory>
#include <string>
#include <vector>

#include "common/base/random.h"
#include "gtest/gtest.h"
#include "tests/unit/cuda_emulated_test_util.h"
#include "worker/device/cpu/cpu_device.h"
#include "worker/device/cpu/cpu_image_ops.h"
#include "worker/device/cuda/batch_norm_kernels.h"
#include "worker/device/cuda/image_kernels.h"
#include "worker/device/cuda/kernels.h"
#include "worker/device/image_geometry.h"

namespace lockstep {
namespace {

using cuda_internal::SoftmaxResult;

TEST_F(CudaKernelsEmulatedTest, SoftmaxCrossEntropyMatchesTheCpu) {
  struct Case {
    int rows, cols;
    bool gradient;
  };
  // One row, a warp's worth of columns and one more, wide rows, blocks of
  // rows that do and do not fill the last block.
  for (const Case& c :
       {Case{1, 1, true}, Case{9, 32, true}, Case{17, 33, false},
        Case{61, 13, true}, Case{61, 1001, true}, Case{300, 10, true}}) {
    SCOPED_TRACE(::testing::Message() << c.rows << " x " << c.cols);
    const std::vector<float> logits = RandomFloats(
        size_t{1} * c.rows * c.cols, c.rows * 1000 + c.cols, -4.0f, 4.0f);
    std::vector<int32_t> labels(c.rows);
    Random random(c.cols);
    for (int32_t& label : labels) {
      label = static_cast<int32_t>(random.Next() % c.cols);
    }
    const float scale = 1.0f / c.rows;
    std::vector<float> want(logits.size(), 5.0f), got(logits.size(), 5.0f);
    double loss = 0;
    int64_t correct = 0;
    ASSERT_TRUE(cpu_->SoftmaxCrossEntropy(
                        c.rows, c.cols, logits.data(), labels.data(), scale,
                        c.gradient ? want.data() : nullptr, &loss, &correct)
                    .ok());
    const OnDevice<float> d_logits(logits), d_got(got);
    const OnDevice<int32_t> d_labels(labels);
    const OnDevice<double> row_loss(c.rows);
    const OnDevice<int> row_hit(c.rows);
    const OnDevice<SoftmaxResult> d_result(1);
    ASSERT_EQ(cuda_internal::LaunchSoftmaxCrossEntropy(
                  c.rows, c.cols, d_logits.get(), d_labels.get(), scale,
                  c.gradient ? d_got.get() : nullptr, row_loss.get(),
                  row_hit.get(), d_result.get(), nullptr),
              cudaSuccess);
    const SoftmaxResult result = d_result.Read()[0];
    got = d_got.Read();
    EXPECT_EQ(result.bad_row, -1);
    EXPECT_NEAR(result.loss_sum, loss, 1e-6 * std::fabs(loss));
    EXPECT_EQ(result.correct, correct);
    ExpectClose(got, want, 1e-6, "dlogits");
  }
}

TEST_F(CudaKernelsEmulatedTest, SoftmaxFindsTheFirstBadLabelAndWritesNothing) {
  constexpr int kRows = 40, kCols = 7;
  const std::vector<float> logits = RandomFloats(kRows * kCols, 3);
  std::vector<int32_t> labels(kRows, 2);
  labels[23] = kCols;
  labels[31] = -1;
  const OnDevice<float> d_logits(logits);
  const OnDevice<int32_t> d_labels(labels);
  const OnDevice<float> grad(std::vector<float>(logits.size(), 5.0f));
  const OnDevice<double> row_loss(kRows);
  const OnDevice<int> row_hit(kRows);
  const OnDevice<SoftmaxResult> d_result(1);
  ASSERT_EQ(cuda_internal::LaunchSoftmaxCrossEntropy(
                kRows, kCols, d_logits.get(), d_labels.get(), 1.0f, grad.get(),
                row_loss.get(), row_hit.get(), d_result.get(), nullptr),
            cudaSuccess);
  const SoftmaxResult result = d_result.Read()[0];
  EXPECT_EQ(result.bad_row, 23);
  EXPECT_EQ(result.bad_label, kCols);
  EXPECT_EQ(grad.Read(), std::vector<float>(logits.size(), 5.0f));
}

TEST_F(CudaKernelsEmulatedTest, BiasAndReluMatchTheCpu) {
  for (const auto& [rows, cols] : std::vector<std::pair<int, int>>{
           {1, 1}, {45, 77}, {9, 300}, {300, 33}, {2000, 70}}) {
    SCOPED_TRACE(::testing::Message() << rows << " x " << cols);
    const size_t n = size_t{1} * rows * cols;
    const std::vector<float> x = RandomFloats(n, 1);
    const std::vector<float> bias = RandomFloats(cols, 2);
    const OnDevice<float> d_x(x), d_bias(bias);
    std::vector<float> want = x;
    const OnDevice<float> got(x);
    ASSERT_TRUE(cpu_->AddBias(rows, cols, bias.data(), want.data()).ok());
    ASSERT_EQ(cuda_internal::LaunchAddBias(rows, cols, d_bias.get(), got.get(),
                                           nullptr),
              cudaSuccess);
    EXPECT_EQ(got.Read(), want);

    std::vector<float> sums_want(cols, 9.0f);
    const OnDevice<float> sums_got(sums_want);
    ASSERT_TRUE(
        cpu_->BiasGradient(rows, cols, x.data(), sums_want.data()).ok());
    const OnDevice<double> scratch(
        cuda_internal::BiasGradientScratchBytes(rows, cols) / sizeof(double));
    ASSERT_EQ(
        cuda_internal::LaunchBiasGradient(rows, cols, d_x.get(), sums_got.get(),
                                          scratch.get(), nullptr),
        cudaSuccess);
    ExpectClose(sums_got.Read(), sums_want, 1e-6, "bias gradient");

    // ReLU into another buffer and in place, forward and backward.
    const std::vector<float> dy = RandomFloats(n, 3);
    const OnDevice<float> d_dy(dy), y_got(n), dx_got(n);
    std::vector<float> y_want(n), dx_want(n);
    ASSERT_TRUE(cpu_->ReluForwardInto(n, x.data(), y_want.data()).ok());
    ASSERT_EQ(
        cuda_internal::LaunchReluForward(n, d_x.get(), y_got.get(), nullptr),
        cudaSuccess);
    EXPECT_EQ(y_got.Read(), y_want);
    ASSERT_TRUE(
        cpu_->ReluBackwardInto(n, y_want.data(), dy.data(), dx_want.data())
            .ok());
    ASSERT_EQ(cuda_internal::LaunchReluBackward(n, y_got.get(), d_dy.get(),
                                                dx_got.get(), nullptr),
              cudaSuccess);
    EXPECT_EQ(dx_got.Read(), dx_want);
    const OnDevice<float> in_place(x);
    ASSERT_EQ(cuda_internal::LaunchReluForward(n, in_place.get(),
                                               in_place.get(), nullptr),
              cudaSuccess);
    EXPECT_EQ(in_place.Read(), y_want);
  }
}

TEST_F(CudaKernelsEmulatedTest, AxpyMatchesTheCpu) {
  const std::vector<float> x = RandomFloats(1000, 4);
  std::vector<float> want = RandomFloats(1000, 5);
  const OnDevice<float> d_x(x), got(want);
  ASSERT_TRUE(cpu_->Axpy(x.size(), -0.75f, x.data(), want.data()).ok());
  ASSERT_EQ(cuda_internal::LaunchAxpy(x.size(), -0.75f, d_x.get(), got.get(),
                                      nullptr),
            cudaSuccess);
  ExpectClose(got.Read(), want, 1e-6, "axpy");
}

WindowGeometry Window(NhwcShape input, int window, int stride, int pad,
                      int out) {
  WindowGeometry g;
  g.input = input;
  g.window_height = g.window_width = window;
  g.stride_height = g.stride_width = stride;
  g.pad_top = g.pad_left = pad;
  g.out_height = g.out_width = out;
  return g;
}

// The image ops gather in the CPU's order: the same bits.
TEST_F(CudaKernelsEmulatedTest, ImageOpsMatchTheCpuBitForBit) {
  for (const WindowGeometry& g :
       {Window({2, 7, 7, 3}, 3, 2, 0, 3), Window({2, 5, 5, 2}, 3, 1, 1, 5),
        Window({3, 8, 8, 4}, 1, 2, 0, 4), Window({1, 6, 6, 5}, 2, 3, 1, 2)}) {
    SCOPED_TRACE(::testing::Message()
                 << g.input.height << "x" << g.input.width << " window "
                 << g.window_height << " stride " << g.stride_height);
    const elements::Window e = ToElements(g);
    const std::vector<float> x = RandomFloats(g.input.Size(), 12);
    const OnDevice<float> d_x(x);
    std::vector<float> columns_want(g.OutputPixels() * g.PatchSize());
    const OnDevice<float> columns_got(columns_want.size());
    ASSERT_TRUE(cpu_ops::Im2Col(g, x.data(), columns_want.data()).ok());
    ASSERT_EQ(
        cuda_internal::LaunchIm2Col(e, d_x.get(), columns_got.get(), nullptr),
        cudaSuccess);
    EXPECT_EQ(columns_got.Read(), columns_want) << "im2col";

    const std::vector<float> columns = RandomFloats(columns_want.size(), 13);
    const OnDevice<float> d_columns(columns), image_got(x.size());
    std::vector<float> image_want(x.size());
    ASSERT_TRUE(cpu_ops::Col2Im(g, columns.data(), image_want.data()).ok());
    ASSERT_EQ(cuda_internal::LaunchCol2Im(e, d_columns.get(), image_got.get(),
                                          nullptr),
              cudaSuccess);
    EXPECT_EQ(image_got.Read(), image_want) << "col2im";

    const size_t outputs = g.OutputPixels() * g.input.channels;
    std::vector<float> y_want(outputs);
    std::vector<int32_t> argmax_want(outputs);
    const OnDevice<float> y_got(outputs);
    const OnDevice<int32_t> argmax_got(outputs);
    ASSERT_TRUE(
        cpu_ops::MaxPoolForward(g, x.data(), y_want.data(), argmax_want.data())
            .ok());
    ASSERT_EQ(cuda_internal::LaunchMaxPoolForward(e, d_x.get(), y_got.get(),
                                                  argmax_got.get(), nullptr),
              cudaSuccess);
    EXPECT_EQ(y_got.Read(), y_want) << "max pool";
    EXPECT_EQ(argmax_got.Read(), argmax_want) << "max pool's arg max";

    const std::vector<float> dy = RandomFloats(outputs, 14);
    const OnDevice<float> d_dy(dy), dx_got(x.size());
    const OnDevice<int32_t> argmax(argmax_want);
    std::vector<float> dx_want(x.size());
    ASSERT_TRUE(cpu_ops::MaxPoolBackward(g, dy.data(), argmax_want.data(),
                                         dx_want.data())
                    .ok());
    ASSERT_EQ(cuda_internal::LaunchMaxPoolBackward(e, d_dy.get(), argmax.get(),
                                                   dx_got.get(), nullptr),
              cudaSuccess);
    EXPECT_EQ(dx_got.Read(), dx_want) << "max pool backward";
  }
}

TEST_F(CudaKernelsEmulatedTest, PaddingAndAveragePoolingMatchTheCpu) {
  const NhwcShape shape{2, 5, 4, 3};
  const Padding2D padding{1, 2, 0, 3};
  const elements::Pad e = ToElements(shape, padding);
  const std::vector<float> x = RandomFloats(shape.Size(), 15);
  const size_t padded = size_t{2} * (5 + 1 + 2) * (4 + 0 + 3) * 3;
  const OnDevice<float> d_x(x), y_got(padded);
  std::vector<float> y_want(padded);
  ASSERT_TRUE(cpu_ops::ZeroPad2D(shape, padding, x.data(), y_want.data()).ok());
  ASSERT_EQ(cuda_internal::LaunchZeroPad2D(e, d_x.get(), y_got.get(), nullptr),
            cudaSuccess);
  EXPECT_EQ(y_got.Read(), y_want) << "zero padding";
  const std::vector<float> dy = RandomFloats(padded, 16);
  const OnDevice<float> d_dy(dy), dx_got(x.size());
  std::vector<float> dx_want(x.size());
  ASSERT_TRUE(
      cpu_ops::ZeroPad2DBackward(shape, padding, dy.data(), dx_want.data())
          .ok());
  ASSERT_EQ(cuda_internal::LaunchZeroPad2DBackward(e, d_dy.get(), dx_got.get(),
                                                   nullptr),
            cudaSuccess);
  EXPECT_EQ(dx_got.Read(), dx_want) << "zero padding backward";

  constexpr int kBatch = 3, kPixels = 49, kChannels = 37;
  const std::vector<float> maps =
      RandomFloats(kBatch * kPixels * kChannels, 17);
  const OnDevice<float> d_maps(maps), mean_got(kBatch * kChannels);
  std::vector<float> mean_want(kBatch * kChannels);
  ASSERT_TRUE(cpu_ops::GlobalAvgPool(kBatch, kPixels, kChannels, maps.data(),
                                     mean_want.data())
                  .ok());
  ASSERT_EQ(
      cuda_internal::LaunchGlobalAvgPool(kBatch, kPixels, kChannels,
                                         d_maps.get(), mean_got.get(), nullptr),
      cudaSuccess);
  EXPECT_EQ(mean_got.Read(), mean_want) << "global average pooling";
  const std::vector<float> dmean = RandomFloats(mean_want.size(), 18);
  const OnDevice<float> d_dmean(dmean), dmaps_got(maps.size());
  std::vector<float> dmaps_want(maps.size());
  ASSERT_TRUE(cpu_ops::GlobalAvgPoolBackward(kBatch, kPixels, kChannels,
                                             dmean.data(), dmaps_want.data())
                  .ok());
  ASSERT_EQ(
      cuda_internal::LaunchGlobalAvgPoolBackward(
          kBatch, kPixels, kChannels, d_dmean.get(), dmaps_got.get(), nullptr),
      cudaSuccess);
  EXPECT_EQ(dmaps_got.Read(), dmaps_want) << "global average pooling backward";
}

// The emulation refuses what a GPU refuses, so the cudaSuccess above means
// the launch configurations were valid: an empty grid (the CUDA device
// returns before launching for empty tensors) is an invalid configuration,
// reported once, as cudaGetLastError does.
TEST_F(CudaKernelsEmulatedTest, AnEmptyGridIsAnInvalidConfiguration) {
  const OnDevice<float> x(std::vector<float>{-1.0f});
  EXPECT_EQ(cuda_internal::LaunchReluForward(0, x.get(), x.get(), nullptr),
            cudaErrorInvalidConfiguration);
  EXPECT_EQ(cudaGetLastError(), cudaSuccess);
  EXPECT_EQ(x.Read(), std::vector<float>{-1.0f});
}

}  // namespace
}  // namespace lockstep
