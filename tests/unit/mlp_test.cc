#include "worker/model/mlp.h"

#include <algorithm>
#include <cmath>
#include <cstdint>
#include <limits>
#include <memory>
#include <utility>
#include <vector>

#include "common/base/random.h"
#include "gtest/gtest.h"
#include "tests/unit/mlp_test_util.h"
#include "worker/device/cpu/cpu_device.h"

namespace lockstep {
namespace {

using mlp_test::LayoutOf;
using mlp_test::Offsets;
using mlp_test::ReferenceLoss;

std::vector<float> RandomFloats(size_t n, float lo, float hi, Random& random) {
  std::vector<float> v(n);
  for (float& x : v) x = random.Uniform(lo, hi);
  return v;
}

std::vector<int32_t> RandomLabels(size_t n, int classes, Random& random) {
  std::vector<int32_t> v(n);
  for (int32_t& y : v) y = static_cast<int32_t>(random.UniformInt(classes));
  return v;
}

double MaxAbs(const std::vector<double>& v) {
  double m = 0.0;
  for (double x : v) m = std::max(m, std::abs(x));
  return m;
}

class MlpTest : public ::testing::Test {
 protected:
  std::unique_ptr<GraphModel> MakeMlp(const std::vector<int>& sizes,
                                      int max_batch) {
    auto mlp = CreateMlp(sizes, max_batch, device_.get());
    EXPECT_TRUE(mlp.ok()) << mlp.status();
    return mlp.ok() ? std::move(*mlp) : nullptr;
  }

  // Glorot kernels plus non-zero biases, so every parameter matters.
  std::vector<float> RandomWeights(const Model& mlp,
                                   const std::vector<int>& sizes,
                                   uint64_t seed) {
    std::vector<float> w = mlp.InitialWeights(seed);
    const Offsets off = LayoutOf(sizes);
    Random random(seed + 1);
    for (size_t l = 0; l < off.bias.size(); ++l) {
      for (int j = 0; j < sizes[l + 1]; ++j) {
        w[off.bias[l] + j] = random.Uniform(-0.3f, 0.3f);
      }
    }
    return w;
  }

  std::unique_ptr<Device> device_ = CpuDevice::Create(1);
};

TEST_F(MlpTest, TensorsFollowKerasNamesAndShapes) {
  auto mlp = MakeMlp({7, 5, 4, 3}, 6);
  ASSERT_NE(mlp, nullptr);
  const std::vector<TensorInfo> want = {
      {"dense_0/kernel", {7, 5}}, {"dense_0/bias", {5}},
      {"dense_1/kernel", {5, 4}}, {"dense_1/bias", {4}},
      {"dense_2/kernel", {4, 3}}, {"dense_2/bias", {3}}};
  EXPECT_EQ(mlp->Tensors(), want);
  EXPECT_EQ(mlp->NumParameters(), 7 * 5 + 5 + 5 * 4 + 4 + 4 * 3 + 3);
  EXPECT_EQ(mlp->FeatureSize(), 7);
  EXPECT_EQ(mlp->StateSize(), 0);
  EXPECT_EQ(mlp->max_batch(), 6);
}

TEST_F(MlpTest, InitialWeightsAreGlorotAndDeterministic) {
  const std::vector<int> sizes = {7, 5, 4, 3};
  auto mlp = MakeMlp(sizes, 6);
  ASSERT_NE(mlp, nullptr);
  const std::vector<float> w = mlp->InitialWeights(42);
  ASSERT_EQ(static_cast<int64_t>(w.size()), mlp->NumParameters());
  EXPECT_EQ(mlp->InitialWeights(42), w);
  EXPECT_NE(mlp->InitialWeights(43), w);

  const Offsets off = LayoutOf(sizes);
  for (size_t l = 0; l + 1 < sizes.size(); ++l) {
    const float limit =
        static_cast<float>(std::sqrt(6.0 / (sizes[l] + sizes[l + 1])));
    float max_abs = 0.0f;
    for (size_t i = off.kernel[l]; i < off.bias[l]; ++i) {
      EXPECT_LE(std::abs(w[i]), limit) << "layer " << l << " index " << i;
      max_abs = std::max(max_abs, std::abs(w[i]));
    }
    // Spread over the range, not collapsed near zero.
    EXPECT_GT(max_abs, 0.5f * limit) << "layer " << l;
    for (int j = 0; j < sizes[l + 1]; ++j) {
      EXPECT_EQ(w[off.bias[l] + j], 0.0f) << "layer " << l;
    }
  }
}

TEST_F(MlpTest, GradientsMatchFiniteDifferencesAndReference) {
  const std::vector<int> sizes = {7, 5, 4, 3};
  const int rows = 6;
  auto mlp = MakeMlp(sizes, rows);
  ASSERT_NE(mlp, nullptr);
  Random random(7);
  const std::vector<float> w = RandomWeights(*mlp, sizes, 11);
  const std::vector<float> x = RandomFloats(rows * sizes[0], -1, 1, random);
  const std::vector<int32_t> y = RandomLabels(rows, sizes.back(), random);
  ASSERT_TRUE(mlp->SetWeights(w).ok());

  // Pre-filled with junk: every entry must be overwritten.
  std::vector<float> grad(mlp->NumParameters(),
                          std::numeric_limits<float>::quiet_NaN());
  auto stats = mlp->ComputeGradients(x, y, absl::MakeSpan(grad));
  ASSERT_TRUE(stats.ok()) << stats.status();
  EXPECT_EQ(stats->examples, rows);

  const std::vector<double> wd(w.begin(), w.end());
  std::vector<double> ref_grad;
  const double ref_loss = ReferenceLoss(sizes, wd, x, y, &ref_grad);
  EXPECT_NEAR(stats->loss_sum / rows, ref_loss, 1e-5 * ref_loss);

  // Central differences of the double loss.
  std::vector<double> numeric(wd.size());
  const double h = 1e-6;
  for (size_t p = 0; p < wd.size(); ++p) {
    std::vector<double> plus = wd, minus = wd;
    plus[p] += h;
    minus[p] -= h;
    numeric[p] = (ReferenceLoss(sizes, plus, x, y, nullptr) -
                  ReferenceLoss(sizes, minus, x, y, nullptr)) /
                 (2 * h);
  }
  const double scale = MaxAbs(numeric);
  ASSERT_GT(scale, 1e-3);
  for (size_t p = 0; p < wd.size(); ++p) {
    EXPECT_NEAR(ref_grad[p], numeric[p], 1e-6 * scale) << "reference " << p;
    EXPECT_NEAR(grad[p], numeric[p], 1e-4 * scale) << "finite diff " << p;
    EXPECT_NEAR(grad[p], ref_grad[p], 1e-5 * scale) << "analytic " << p;
  }
}

TEST_F(MlpTest, SmallerBatchAfterLargerReusesBuffersCorrectly) {
  const std::vector<int> sizes = {7, 5, 4, 3};
  auto mlp = MakeMlp(sizes, 8);
  ASSERT_NE(mlp, nullptr);
  Random random(3);
  const std::vector<float> w = RandomWeights(*mlp, sizes, 5);
  ASSERT_TRUE(mlp->SetWeights(w).ok());
  std::vector<float> grad(mlp->NumParameters());
  const std::vector<float> x8 = RandomFloats(8 * sizes[0], -1, 1, random);
  const std::vector<int32_t> y8 = RandomLabels(8, sizes.back(), random);
  ASSERT_TRUE(mlp->ComputeGradients(x8, y8, absl::MakeSpan(grad)).ok());

  const std::vector<float> x3 = RandomFloats(3 * sizes[0], -1, 1, random);
  const std::vector<int32_t> y3 = RandomLabels(3, sizes.back(), random);
  auto stats = mlp->ComputeGradients(x3, y3, absl::MakeSpan(grad));
  ASSERT_TRUE(stats.ok()) << stats.status();
  std::vector<double> ref_grad;
  const double ref_loss = ReferenceLoss(
      sizes, std::vector<double>(w.begin(), w.end()), x3, y3, &ref_grad);
  EXPECT_NEAR(stats->loss_sum / 3, ref_loss, 1e-5 * ref_loss);
  const double scale = MaxAbs(ref_grad);
  for (size_t p = 0; p < grad.size(); ++p) {
    EXPECT_NEAR(grad[p], ref_grad[p], 1e-5 * scale) << p;
  }
}

TEST_F(MlpTest, SgdReducesLossOnSeparableData) {
  // Three clusters in the plane, well apart.
  const std::vector<int> sizes = {2, 9, 3};
  const int rows = 30;
  auto mlp = MakeMlp(sizes, rows);
  ASSERT_NE(mlp, nullptr);
  Random random(99);
  const float centers[3][2] = {{2.0f, 0.0f}, {-1.0f, 1.7f}, {-1.0f, -1.7f}};
  std::vector<float> x(rows * 2);
  std::vector<int32_t> y(rows);
  for (int r = 0; r < rows; ++r) {
    y[r] = r % 3;
    x[2 * r] = centers[y[r]][0] + random.Uniform(-0.3f, 0.3f);
    x[2 * r + 1] = centers[y[r]][1] + random.Uniform(-0.3f, 0.3f);
  }
  std::vector<float> w = mlp->InitialWeights(1);
  std::vector<float> grad(w.size());
  double first_loss = 0.0;
  BatchStats last;
  for (int step = 0; step < 50; ++step) {
    ASSERT_TRUE(mlp->SetWeights(w).ok());
    auto stats = mlp->ComputeGradients(x, y, absl::MakeSpan(grad));
    ASSERT_TRUE(stats.ok()) << stats.status();
    if (step == 0) first_loss = stats->loss_sum / rows;
    last = *stats;
    for (size_t i = 0; i < w.size(); ++i) w[i] -= 0.2f * grad[i];
  }
  EXPECT_LT(last.loss_sum / rows, 0.5 * first_loss);
  EXPECT_EQ(last.correct, rows);
}

TEST_F(MlpTest, EvaluateSplitsIntoMaxBatchPieces) {
  const std::vector<int> sizes = {7, 5, 4, 3};
  auto mlp = MakeMlp(sizes, 4);
  ASSERT_NE(mlp, nullptr);
  Random random(21);
  const std::vector<float> w = RandomWeights(*mlp, sizes, 8);
  ASSERT_TRUE(mlp->SetWeights(w).ok());
  const int rows = 10;
  const std::vector<float> x = RandomFloats(rows * sizes[0], -1, 1, random);
  const std::vector<int32_t> y = RandomLabels(rows, sizes.back(), random);

  auto all = mlp->Evaluate(x, y);
  ASSERT_TRUE(all.ok()) << all.status();
  EXPECT_EQ(all->examples, rows);

  BatchStats sum;
  const absl::Span<const float> xs(x);
  const absl::Span<const int32_t> ys(y);
  for (int start = 0; start < rows; start += 4) {
    const int n = std::min(4, rows - start);
    auto piece = mlp->Evaluate(xs.subspan(start * sizes[0], n * sizes[0]),
                               ys.subspan(start, n));
    ASSERT_TRUE(piece.ok()) << piece.status();
    sum.loss_sum += piece->loss_sum;
    sum.correct += piece->correct;
    sum.examples += piece->examples;
  }
  EXPECT_DOUBLE_EQ(all->loss_sum, sum.loss_sum);
  EXPECT_EQ(all->correct, sum.correct);
  EXPECT_EQ(all->examples, sum.examples);

  const double ref = ReferenceLoss(
      sizes, std::vector<double>(w.begin(), w.end()), x, y, nullptr);
  EXPECT_NEAR(all->loss_sum / rows, ref, 1e-5 * ref);

  auto none = mlp->Evaluate({}, {});
  ASSERT_TRUE(none.ok()) << none.status();
  EXPECT_EQ(none->examples, 0);
  EXPECT_EQ(none->loss_sum, 0.0);
}

TEST_F(MlpTest, CreateRejectsBadShapes) {
  const auto code = [this](std::vector<int> sizes, int max_batch,
                           Device* device) {
    return CreateMlp(sizes, max_batch, device).status().code();
  };
  const auto kInvalid = absl::StatusCode::kInvalidArgument;
  EXPECT_EQ(code({5}, 4, device_.get()), kInvalid);
  EXPECT_EQ(code({}, 4, device_.get()), kInvalid);
  EXPECT_EQ(code({5, 0, 3}, 4, device_.get()), kInvalid);
  EXPECT_EQ(code({5, -2}, 4, device_.get()), kInvalid);
  EXPECT_EQ(code({5, 3}, 0, device_.get()), kInvalid);
  EXPECT_EQ(code({5, 3}, 4, nullptr), kInvalid);
}

TEST_F(MlpTest, RejectsInvalidInputs) {
  const std::vector<int> sizes = {7, 5, 3};
  auto mlp = MakeMlp(sizes, 4);
  ASSERT_NE(mlp, nullptr);
  const auto kInvalid = absl::StatusCode::kInvalidArgument;
  std::vector<float> grad(mlp->NumParameters());
  const std::vector<float> x(4 * 7, 0.5f);
  const std::vector<int32_t> y = {0, 1, 2, 0};

  EXPECT_EQ(mlp->SetWeights(std::vector<float>(3)).code(), kInvalid);

  const absl::Span<const float> xs(x);
  const absl::Span<const int32_t> ys(y);
  // No rows; more rows than max_batch; features not rows x 7.
  EXPECT_EQ(mlp->ComputeGradients({}, {}, absl::MakeSpan(grad)).status().code(),
            kInvalid);
  const std::vector<float> x5(5 * 7, 0.5f);
  const std::vector<int32_t> y5 = {0, 1, 2, 0, 1};
  EXPECT_EQ(mlp->ComputeGradients(x5, y5, absl::MakeSpan(grad)).status().code(),
            kInvalid);
  EXPECT_EQ(mlp->ComputeGradients(xs.subspan(1), ys, absl::MakeSpan(grad))
                .status()
                .code(),
            kInvalid);
  // Gradient of the wrong length.
  std::vector<float> short_grad(grad.size() - 1);
  EXPECT_EQ(
      mlp->ComputeGradients(xs, ys, absl::MakeSpan(short_grad)).status().code(),
      kInvalid);
  // A label outside [0, 3), caught by the device.
  const std::vector<int32_t> bad = {0, 1, 3, 0};
  EXPECT_EQ(
      mlp->ComputeGradients(xs, bad, absl::MakeSpan(grad)).status().code(),
      kInvalid);
  EXPECT_EQ(mlp->Evaluate(xs, bad).status().code(), kInvalid);
  EXPECT_EQ(mlp->Evaluate(xs.subspan(0, 20), ys).status().code(), kInvalid);

  // A good call still works after the rejected ones.
  EXPECT_TRUE(mlp->ComputeGradients(xs, ys, absl::MakeSpan(grad)).ok());
}

}  // namespace
}  // namespace lockstep
