// The CUDA device's kernels (worker/cuda/*.cu, the very files nvcc compiles
// for the GPU) run on the CPU through the CUDA emulation of
// tests/cuda_emulation, against the CPU device's implementations: every
// machine, with or without a GPU, runs this. The element-wise ops and the
// image ops must agree bit for bit; sums taken in another order (the
// kernels reduce in double, in tiles) within rounding. On a GPU, nvcc's
// fused multiply-adds and CUDA's expf add last-bit differences that the
// GPU tests (tests/gpu) allow for.
#include <cmath>
#include <cstdint>
#include <cstdlib>
#include <memory>
#include <string>
#include <vector>

#include "common/random.h"
#include "gtest/gtest.h"
#include "worker/cpu_batch_norm_ops.h"
#include "worker/cpu_device.h"
#include "worker/cpu_image_ops.h"
#include "worker/cuda/batch_norm_kernels.h"
#include "worker/cuda/image_kernels.h"
#include "worker/cuda/kernels.h"
#include "worker/image_geometry.h"

namespace lockstep {
namespace {

using cuda_internal::SoftmaxResult;

std::vector<float> RandomFloats(size_t n, uint64_t seed, float lo = -1.0f,
                                float hi = 1.0f) {
  Random random(seed);
  std::vector<float> v(n);
  for (float& x : v) x = random.Uniform(lo, hi);
  return v;
}

// |got - want| <= tolerance * max |want|, element by element.
void ExpectClose(const std::vector<float>& got, const std::vector<float>& want,
                 double tolerance, const std::string& what) {
  ASSERT_EQ(got.size(), want.size()) << what;
  double scale = 0;
  for (float w : want) scale = std::max(scale, std::fabs(double{w}));
  for (size_t i = 0; i < got.size(); ++i) {
    ASSERT_LE(std::fabs(double{got[i]} - want[i]), tolerance * scale)
        << what << ", element " << i << ": " << got[i] << " vs " << want[i];
  }
}

class CudaKernelsEmulatedTest : public ::testing::Test {
 protected:
  std::unique_ptr<Device> cpu_ = CpuDevice::Create(1, CpuConv::kIm2Col);
};

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
    std::vector<double> row_loss(c.rows);
    std::vector<int> row_hit(c.rows);
    SoftmaxResult result{};
    ASSERT_EQ(cuda_internal::LaunchSoftmaxCrossEntropy(
                  c.rows, c.cols, logits.data(), labels.data(), scale,
                  c.gradient ? got.data() : nullptr, row_loss.data(),
                  row_hit.data(), &result, nullptr),
              cudaSuccess);
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
  std::vector<float> grad(logits.size(), 5.0f);
  std::vector<double> row_loss(kRows);
  std::vector<int> row_hit(kRows);
  SoftmaxResult result{};
  ASSERT_EQ(cuda_internal::LaunchSoftmaxCrossEntropy(
                kRows, kCols, logits.data(), labels.data(), 1.0f, grad.data(),
                row_loss.data(), row_hit.data(), &result, nullptr),
            cudaSuccess);
  EXPECT_EQ(result.bad_row, 23);
  EXPECT_EQ(result.bad_label, kCols);
  EXPECT_EQ(grad, std::vector<float>(logits.size(), 5.0f));
}

TEST_F(CudaKernelsEmulatedTest, BiasAndReluMatchTheCpu) {
  for (const auto& [rows, cols] : std::vector<std::pair<int, int>>{
           {1, 1}, {45, 77}, {9, 300}, {300, 33}}) {
    SCOPED_TRACE(::testing::Message() << rows << " x " << cols);
    const size_t n = size_t{1} * rows * cols;
    const std::vector<float> x = RandomFloats(n, 1);
    const std::vector<float> bias = RandomFloats(cols, 2);
    std::vector<float> want = x, got = x;
    ASSERT_TRUE(cpu_->AddBias(rows, cols, bias.data(), want.data()).ok());
    ASSERT_EQ(cuda_internal::LaunchAddBias(rows, cols, bias.data(), got.data(),
                                           nullptr),
              cudaSuccess);
    EXPECT_EQ(got, want);

    std::vector<float> sums_want(cols, 9.0f), sums_got(cols, 9.0f);
    ASSERT_TRUE(
        cpu_->BiasGradient(rows, cols, x.data(), sums_want.data()).ok());
    ASSERT_EQ(cuda_internal::LaunchBiasGradient(rows, cols, x.data(),
                                                sums_got.data(), nullptr),
              cudaSuccess);
    ExpectClose(sums_got, sums_want, 1e-6, "bias gradient");

    // ReLU into another buffer and in place, forward and backward.
    const std::vector<float> dy = RandomFloats(n, 3);
    std::vector<float> y_want(n), y_got(n, 7.0f), dx_want(n), dx_got(n, 7.0f);
    ASSERT_TRUE(cpu_->ReluForwardInto(n, x.data(), y_want.data()).ok());
    ASSERT_EQ(
        cuda_internal::LaunchReluForward(n, x.data(), y_got.data(), nullptr),
        cudaSuccess);
    EXPECT_EQ(y_got, y_want);
    ASSERT_TRUE(
        cpu_->ReluBackwardInto(n, y_want.data(), dy.data(), dx_want.data())
            .ok());
    ASSERT_EQ(cuda_internal::LaunchReluBackward(n, y_got.data(), dy.data(),
                                                dx_got.data(), nullptr),
              cudaSuccess);
    EXPECT_EQ(dx_got, dx_want);
    std::vector<float> in_place = x;
    ASSERT_EQ(cuda_internal::LaunchReluForward(n, in_place.data(),
                                               in_place.data(), nullptr),
              cudaSuccess);
    EXPECT_EQ(in_place, y_want);
  }
}

TEST_F(CudaKernelsEmulatedTest, AxpyMatchesTheCpu) {
  const std::vector<float> x = RandomFloats(1000, 4);
  std::vector<float> want = RandomFloats(1000, 5), got = want;
  ASSERT_TRUE(cpu_->Axpy(x.size(), -0.75f, x.data(), want.data()).ok());
  ASSERT_EQ(cuda_internal::LaunchAxpy(x.size(), -0.75f, x.data(), got.data(),
                                      nullptr),
            cudaSuccess);
  ExpectClose(got, want, 1e-6, "axpy");
}

// Batch statistics are summed in double in tiles of rows on the GPU, in
// float (in order) on the CPU: close, not equal. 3000 rows make several
// tiles; an offset of 20 tests the variance's cancellation.
TEST_F(CudaKernelsEmulatedTest, BatchNormMatchesTheCpu) {
  struct Case {
    int rows, channels;
    float offset;
  };
  for (const Case& c : {Case{1, 1, 0.0f}, Case{18, 4, 0.0f},
                        Case{257, 37, 20.0f}, Case{3000, 2, -3.0f}}) {
    SCOPED_TRACE(::testing::Message() << c.rows << " x " << c.channels);
    const int rows = c.rows, channels = c.channels;
    std::vector<float> x = RandomFloats(size_t{1} * rows * channels, 6);
    for (float& v : x) v += c.offset;
    const std::vector<float> dy = RandomFloats(x.size(), 7);
    const std::vector<float> gamma = RandomFloats(channels, 8, 0.5f, 1.5f);
    const std::vector<float> beta = RandomFloats(channels, 9);
    const std::vector<float> moving_mean = RandomFloats(channels, 10);
    const std::vector<float> moving_var = RandomFloats(channels, 11, 0.1f, 1);
    // Scratch as cudaMalloc would give it: 256-byte aligned.
    std::vector<char> scratch_bytes(
        cuda_internal::BatchNormScratchBytes(rows, channels) + 256);
    void* scratch =
        scratch_bytes.data() +
        (256 - reinterpret_cast<uintptr_t>(scratch_bytes.data()) % 256) % 256;

    struct Outputs {
      std::vector<float> y, mean, var, saved_mean, saved_inv_std;
    };
    Outputs want{std::vector<float>(x.size()), moving_mean, moving_var,
                 std::vector<float>(channels), std::vector<float>(channels)};
    Outputs got = want;
    ASSERT_TRUE(cpu_ops::BatchNormTraining(
                    rows, channels, x.data(), gamma.data(), beta.data(), 1e-3f,
                    0.99f, want.y.data(), want.mean.data(), want.var.data(),
                    want.saved_mean.data(), want.saved_inv_std.data())
                    .ok());
    ASSERT_EQ(
        cuda_internal::LaunchBatchNormTraining(
            rows, channels, x.data(), gamma.data(), beta.data(), 1e-3f, 0.99f,
            got.y.data(), got.mean.data(), got.var.data(),
            got.saved_mean.data(), got.saved_inv_std.data(), scratch, nullptr),
        cudaSuccess);
    ExpectClose(got.y, want.y, 1e-5, "y");
    ExpectClose(got.mean, want.mean, 1e-6, "moving mean");
    ExpectClose(got.var, want.var, 1e-6, "moving variance");
    ExpectClose(got.saved_mean, want.saved_mean, 1e-6, "saved mean");
    ExpectClose(got.saved_inv_std, want.saved_inv_std, 1e-5, "saved 1/std");

    std::vector<float> dx_want(x.size()), dx_got(x.size());
    std::vector<float> dgamma_want(channels), dgamma_got(channels);
    std::vector<float> dbeta_want(channels), dbeta_got(channels);
    ASSERT_TRUE(cpu_ops::BatchNormBackward(
                    rows, channels, x.data(), dy.data(), gamma.data(),
                    want.saved_mean.data(), want.saved_inv_std.data(),
                    dx_want.data(), dgamma_want.data(), dbeta_want.data())
                    .ok());
    ASSERT_EQ(
        cuda_internal::LaunchBatchNormBackward(
            rows, channels, x.data(), dy.data(), gamma.data(),
            want.saved_mean.data(), want.saved_inv_std.data(), dx_got.data(),
            dgamma_got.data(), dbeta_got.data(), scratch, nullptr),
        cudaSuccess);
    ExpectClose(dx_got, dx_want, 1e-4, "dx");
    ExpectClose(dgamma_got, dgamma_want, 1e-5, "dgamma");
    ExpectClose(dbeta_got, dbeta_want, 1e-5, "dbeta");

    std::vector<float> inference_want(x.size()), inference_got(x.size());
    ASSERT_TRUE(cpu_ops::BatchNormInference(
                    rows, channels, x.data(), gamma.data(), beta.data(),
                    moving_mean.data(), moving_var.data(), 1e-3f,
                    inference_want.data())
                    .ok());
    ASSERT_EQ(cuda_internal::LaunchBatchNormInference(
                  rows, channels, x.data(), gamma.data(), beta.data(),
                  moving_mean.data(), moving_var.data(), 1e-3f,
                  inference_got.data(), scratch, nullptr),
              cudaSuccess);
    ExpectClose(inference_got, inference_want, 1e-6, "inference y");
  }
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
    std::vector<float> columns_want(g.OutputPixels() * g.PatchSize()),
        columns_got(columns_want.size(), 7.0f);
    ASSERT_TRUE(cpu_ops::Im2Col(g, x.data(), columns_want.data()).ok());
    ASSERT_EQ(
        cuda_internal::LaunchIm2Col(e, x.data(), columns_got.data(), nullptr),
        cudaSuccess);
    EXPECT_EQ(columns_got, columns_want) << "im2col";

    const std::vector<float> columns = RandomFloats(columns_want.size(), 13);
    std::vector<float> image_want(x.size()), image_got(x.size(), 7.0f);
    ASSERT_TRUE(cpu_ops::Col2Im(g, columns.data(), image_want.data()).ok());
    ASSERT_EQ(cuda_internal::LaunchCol2Im(e, columns.data(), image_got.data(),
                                          nullptr),
              cudaSuccess);
    EXPECT_EQ(image_got, image_want) << "col2im";

    const size_t outputs = g.OutputPixels() * g.input.channels;
    std::vector<float> y_want(outputs), y_got(outputs, 7.0f);
    std::vector<int32_t> argmax_want(outputs), argmax_got(outputs, -5);
    ASSERT_TRUE(
        cpu_ops::MaxPoolForward(g, x.data(), y_want.data(), argmax_want.data())
            .ok());
    ASSERT_EQ(cuda_internal::LaunchMaxPoolForward(e, x.data(), y_got.data(),
                                                  argmax_got.data(), nullptr),
              cudaSuccess);
    EXPECT_EQ(y_got, y_want) << "max pool";
    EXPECT_EQ(argmax_got, argmax_want) << "max pool's arg max";

    const std::vector<float> dy = RandomFloats(outputs, 14);
    std::vector<float> dx_want(x.size()), dx_got(x.size(), 7.0f);
    ASSERT_TRUE(cpu_ops::MaxPoolBackward(g, dy.data(), argmax_want.data(),
                                         dx_want.data())
                    .ok());
    ASSERT_EQ(cuda_internal::LaunchMaxPoolBackward(
                  e, dy.data(), argmax_want.data(), dx_got.data(), nullptr),
              cudaSuccess);
    EXPECT_EQ(dx_got, dx_want) << "max pool backward";
  }
}

TEST_F(CudaKernelsEmulatedTest, PaddingAndAveragePoolingMatchTheCpu) {
  const NhwcShape shape{2, 5, 4, 3};
  const Padding2D padding{1, 2, 0, 3};
  const elements::Pad e = ToElements(shape, padding);
  const std::vector<float> x = RandomFloats(shape.Size(), 15);
  const size_t padded = size_t{2} * (5 + 1 + 2) * (4 + 0 + 3) * 3;
  std::vector<float> y_want(padded), y_got(padded, 7.0f);
  ASSERT_TRUE(cpu_ops::ZeroPad2D(shape, padding, x.data(), y_want.data()).ok());
  ASSERT_EQ(cuda_internal::LaunchZeroPad2D(e, x.data(), y_got.data(), nullptr),
            cudaSuccess);
  EXPECT_EQ(y_got, y_want) << "zero padding";
  const std::vector<float> dy = RandomFloats(padded, 16);
  std::vector<float> dx_want(x.size()), dx_got(x.size(), 7.0f);
  ASSERT_TRUE(
      cpu_ops::ZeroPad2DBackward(shape, padding, dy.data(), dx_want.data())
          .ok());
  ASSERT_EQ(cuda_internal::LaunchZeroPad2DBackward(e, dy.data(), dx_got.data(),
                                                   nullptr),
            cudaSuccess);
  EXPECT_EQ(dx_got, dx_want) << "zero padding backward";

  constexpr int kBatch = 3, kPixels = 49, kChannels = 37;
  const std::vector<float> maps =
      RandomFloats(kBatch * kPixels * kChannels, 17);
  std::vector<float> mean_want(kBatch * kChannels), mean_got(mean_want.size());
  ASSERT_TRUE(cpu_ops::GlobalAvgPool(kBatch, kPixels, kChannels, maps.data(),
                                     mean_want.data())
                  .ok());
  ASSERT_EQ(
      cuda_internal::LaunchGlobalAvgPool(kBatch, kPixels, kChannels,
                                         maps.data(), mean_got.data(), nullptr),
      cudaSuccess);
  EXPECT_EQ(mean_got, mean_want) << "global average pooling";
  const std::vector<float> dmean = RandomFloats(mean_want.size(), 18);
  std::vector<float> dmaps_want(maps.size()), dmaps_got(maps.size(), 7.0f);
  ASSERT_TRUE(cpu_ops::GlobalAvgPoolBackward(kBatch, kPixels, kChannels,
                                             dmean.data(), dmaps_want.data())
                  .ok());
  ASSERT_EQ(
      cuda_internal::LaunchGlobalAvgPoolBackward(
          kBatch, kPixels, kChannels, dmean.data(), dmaps_got.data(), nullptr),
      cudaSuccess);
  EXPECT_EQ(dmaps_got, dmaps_want) << "global average pooling backward";
}

// The emulation refuses what a GPU refuses, so the cudaSuccess above means
// the launch configurations were valid: an empty grid (the CUDA device
// returns before launching for empty tensors) is an invalid configuration,
// reported once, as cudaGetLastError does.
TEST_F(CudaKernelsEmulatedTest, AnEmptyGridIsAnInvalidConfiguration) {
  float x = -1.0f;
  EXPECT_EQ(cuda_internal::LaunchReluForward(0, &x, &x, nullptr),
            cudaErrorInvalidConfiguration);
  EXPECT_EQ(cudaGetLastError(), cudaSuccess);
  EXPECT_EQ(x, -1.0f);
}

}  // namespace
}  // namespace lockstep
