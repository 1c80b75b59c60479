#include "worker/model/nn/graph_model.h"

#include <algorithm>
#include <cmath>
#include <limits>
#include <memory>
#include <utility>
#include <vector>

#include "gmock/gmock.h"
#include "gtest/gtest.h"
#include "tests/unit/graph_model_test_util.h"
#include "tests/unit/nn_test_util.h"
#include "worker/model/nn/graph_builder.h"

namespace lockstep {
namespace {

using graph_test::Conv;
using graph_test::kC;
using graph_test::kClasses;
using graph_test::kF;
using graph_test::kH;
using graph_test::kW;
using graph_test::TinyResidualGraph;
using graph_test::TinyResidualLoss;
using graph_test::Units;
using nn_test::RefWindow;
using nn_test::Slice;
using nn_test::Vec;
using ::testing::HasSubstr;

class GraphModelTest : public nn_test::OnEachDevice {
 protected:
  std::unique_ptr<GraphModel> MakeTiny(int max_batch) {
    auto graph = TinyResidualGraph();
    EXPECT_TRUE(graph.ok()) << graph.status();
    if (!graph.ok()) return nullptr;
    auto model =
        GraphModel::Create(*std::move(graph), max_batch, device_.get());
    EXPECT_TRUE(model.ok()) << model.status();
    return model.ok() ? *std::move(model) : nullptr;
  }
};

TEST_P(GraphModelTest, BuilderReportsTheFirstError) {
  {
    GraphBuilder b({4, 4, 2});
    const int x = b.Conv2D("c", b.input(), Conv(3, 3, Padding::kSame));
    const int bad = b.Add("add", b.input(), x);  // 4x4x2 + 4x4x3.
    EXPECT_EQ(bad, -1);
    EXPECT_EQ(b.Flatten("f", bad), -1);
    EXPECT_EQ(b.Dense("d", x, Units(0)), -1);  // Not reported: not first.
    auto g = std::move(b).Finish(x);
    EXPECT_EQ(g.status().code(), absl::StatusCode::kInvalidArgument);
    EXPECT_THAT(g.status().message(), HasSubstr("4x4x2 and 4x4x3"));
  }
  {
    GraphBuilder b({4, 4, 2});
    const int x = b.ReLU("same_name", b.input());
    b.ReLU("same_name", x);
    EXPECT_THAT(std::move(b).Finish(2).status().message(),
                HasSubstr("two layers are named same_name"));
  }
  {
    GraphBuilder b({4, 4, 2});
    const int x = b.ReLU("r1", b.input());
    const int y = b.ReLU("r2", b.input());  // x is never read.
    EXPECT_THAT(std::move(b).Finish(y).status().message(),
                HasSubstr("r1 feeds no layer"));
    (void)x;
  }
  {
    GraphBuilder b({4, 4, 2});
    const int x = b.ReLU("r1", b.input());
    b.ReLU("r2", x);
    EXPECT_THAT(std::move(b).Finish(x).status().message(),
                HasSubstr("last layer"));
  }
  {
    GraphBuilder b({4, 4, 2});
    EXPECT_EQ(b.ReLU("r", 7), -1);
    EXPECT_THAT(b.status().message(), HasSubstr("does not exist"));
  }
  {
    GraphBuilder b({4, 4, 2});
    const int x = b.Conv2D("c", b.input(), Conv(3, 5, Padding::kValid));
    EXPECT_EQ(x, -1);
    EXPECT_THAT(b.status().message(), HasSubstr("layer c"));
  }
}

TEST_P(GraphModelTest, TensorsInitialWeightsAndState) {
  auto model = MakeTiny(4);
  ASSERT_NE(model, nullptr);
  const std::vector<TensorInfo> want = {{"conv_a/kernel", {3, 3, kC, kF}},
                                        {"conv_a/bias", {kF}},
                                        {"conv_c/kernel", {3, 3, kF, kF}},
                                        {"conv_c/bias", {kF}},
                                        {"bn/gamma", {kF}},
                                        {"bn/beta", {kF}},
                                        {"dense/kernel", {kF, kClasses}},
                                        {"dense/bias", {kClasses}}};
  EXPECT_EQ(model->Tensors(), want);
  EXPECT_EQ(model->NumParameters(), 57 + 84 + 6 + 16);
  EXPECT_EQ(model->FeatureSize(), kH * kW * kC);
  EXPECT_EQ(model->max_batch(), 4);
  EXPECT_EQ(model->StateTensors(),
            (std::vector<TensorInfo>{{"bn/moving_mean", {kF}},
                                     {"bn/moving_variance", {kF}}}));
  EXPECT_EQ(model->StateSize(), 2 * kF);
  EXPECT_EQ(model->InitialState(), (std::vector<float>{0, 0, 0, 1, 1, 1}));
  std::vector<float> state(2 * kF, -1.0f);
  ASSERT_TRUE(model->State(absl::MakeSpan(state)).ok());
  EXPECT_EQ(state, model->InitialState());  // Create sets it.

  const std::vector<float> w = model->InitialWeights(42);
  EXPECT_EQ(model->InitialWeights(42), w);
  EXPECT_NE(model->InitialWeights(43), w);
  // Glorot limits: conv fans are kh * kw * channels.
  const double limit_a = std::sqrt(6.0 / (9 * kC + 9 * kF));
  const double limit_c = std::sqrt(6.0 / (9 * kF + 9 * kF));
  const double limit_d = std::sqrt(6.0 / (kF + kClasses));
  size_t o = 0;
  auto check = [&](size_t n, double lo, double hi, const char* what) {
    float max_abs = 0;
    for (size_t i = o; i < o + n; ++i) {
      EXPECT_GE(w[i], lo) << what;
      EXPECT_LE(w[i], hi) << what;
      max_abs = std::max(max_abs, std::abs(w[i]));
    }
    o += n;
    return max_abs;
  };
  EXPECT_GT(check(54, -limit_a, limit_a, "conv_a"), 0.5 * limit_a);
  check(3, 0, 0, "conv_a bias");
  EXPECT_GT(check(81, -limit_c, limit_c, "conv_c"), 0.5 * limit_c);
  check(3, 0, 0, "conv_c bias");
  check(3, 1, 1, "gamma");
  check(3, 0, 0, "beta");
  EXPECT_GT(check(12, -limit_d, limit_d, "dense"), 0.3 * limit_d);
  check(4, 0, 0, "dense bias");
}

TEST_P(GraphModelTest, GradientsMatchFiniteDifferencesOfDoubleReference) {
  const int batch = 3;
  auto model = MakeTiny(batch);
  ASSERT_NE(model, nullptr);
  // Non-zero biases and gamma away from 1, so every parameter matters.
  std::vector<float> w = model->InitialWeights(7);
  const std::vector<float> noise =
      nn_test::RandomFloats(w.size(), 8, -0.3f, 0.3f);
  for (size_t i = 0; i < w.size(); ++i) w[i] += noise[i];
  ASSERT_TRUE(model->SetWeights(w).ok());
  const auto x = nn_test::RandomFloats(batch * kH * kW * kC, 9);
  const std::vector<int32_t> y = {2, 0, 3};

  std::vector<float> grad(w.size(), std::numeric_limits<float>::quiet_NaN());
  auto stats = model->ComputeGradients(x, y, absl::MakeSpan(grad));
  ASSERT_TRUE(stats.ok()) << stats.status();
  EXPECT_EQ(stats->examples, batch);
  const Vec wd = nn_test::ToDouble(w);
  const double ref_loss = TinyResidualLoss(wd, x, y);
  EXPECT_NEAR(stats->loss_sum / batch, ref_loss, 1e-5 * ref_loss);

  Vec numeric(wd.size());
  const double h = 1e-6;
  for (size_t i = 0; i < wd.size(); ++i) {
    Vec plus = wd, minus = wd;
    plus[i] += h;
    minus[i] -= h;
    numeric[i] =
        (TinyResidualLoss(plus, x, y) - TinyResidualLoss(minus, x, y)) /
        (2 * h);
  }
  nn_test::ExpectNear(grad, numeric, 2e-4, "gradient");

  // The moving statistics moved halfway (momentum 0.5) from their start.
  std::vector<float> state(model->StateSize());
  ASSERT_TRUE(model->State(absl::MakeSpan(state)).ok());
  EXPECT_NE(state, model->InitialState());
}

// input 4x4x2 -> zero padding (1 all round) -> relu -+-> conv (3x3 same, 2)
//                                                    |        |
//                                                    +-> add -> gap -> dense
// Nothing before the convolution learns: no gradient flows to the padding
// or the ReLU, and the Add passes one to the convolution only.
absl::StatusOr<Graph> ParameterFreeStemGraph() {
  GraphBuilder b({4, 4, 2});
  const int p = b.ZeroPadding2D("pad", b.input(), Padding2D{1, 1, 1, 1});
  const int r = b.ReLU("relu", p);
  const int c = b.Conv2D("conv", r, Conv(2, 3, Padding::kSame));
  const int s = b.Add("add", r, c);
  const int g = b.GlobalAveragePooling2D("gap", s);
  return std::move(b).Finish(b.Dense("dense", g, Units(kClasses)));
}

double ParameterFreeStemLoss(const Vec& p, const std::vector<float>& x,
                             const std::vector<int32_t>& labels) {
  const int batch = static_cast<int>(labels.size());
  Vec r(batch * 6 * 6 * 2, 0.0);
  for (int n = 0; n < batch; ++n)
    for (int h = 0; h < 4; ++h)
      for (int w = 0; w < 4; ++w)
        for (int c = 0; c < 2; ++c) {
          r[((n * 6 + h + 1) * 6 + w + 1) * 2 + c] =
              std::max(0.0, double{x[((n * 4 + h) * 4 + w) * 2 + c]});
        }
  const RefWindow window{batch, 6, 6, 2, 3, 3, 1, 1, 1, 1, 6, 6};
  const Vec conv =
      nn_test::RefConv2D(r, window, Slice(p, 0, 36), Slice(p, 36, 2), 2);
  Vec g(batch * 2, 0.0);
  for (int n = 0; n < batch; ++n)
    for (int q = 0; q < 36; ++q)
      for (int c = 0; c < 2; ++c) {
        const size_t i = (n * 36 + q) * 2 + c;
        g[n * 2 + c] += (r[i] + conv[i]) / 36;
      }
  return nn_test::RefMeanCrossEntropy(
      nn_test::RefDense(g, batch, 2, Slice(p, 38, 2 * kClasses),
                        Slice(p, 38 + 2 * kClasses, kClasses), kClasses),
      batch, kClasses, labels);
}

TEST_P(GraphModelTest, NoGradientsBeforeTheFirstParameters) {
  auto graph = ParameterFreeStemGraph();
  ASSERT_TRUE(graph.ok()) << graph.status();
  // Tensors: input, pad, relu, conv, add, gap, dense.
  EXPECT_EQ(graph->TensorsNeedingGradients(),
            std::vector<bool>({false, false, false, true, true, true, true}));
  const int batch = 2;
  auto model = GraphModel::Create(*std::move(graph), batch, device_.get());
  ASSERT_TRUE(model.ok()) << model.status();
  std::vector<float> w = (*model)->InitialWeights(5);
  const std::vector<float> noise =
      nn_test::RandomFloats(w.size(), 6, -0.3f, 0.3f);
  for (size_t i = 0; i < w.size(); ++i) w[i] += noise[i];
  ASSERT_TRUE((*model)->SetWeights(w).ok());
  const auto x = nn_test::RandomAwayFromZero(batch * 4 * 4 * 2, 7);
  const std::vector<int32_t> y = {1, 3};
  std::vector<float> grad(w.size(), std::numeric_limits<float>::quiet_NaN());
  ASSERT_TRUE((*model)->ComputeGradients(x, y, absl::MakeSpan(grad)).ok());
  const Vec wd = nn_test::ToDouble(w);
  Vec numeric(wd.size());
  const double h = 1e-6;
  for (size_t i = 0; i < wd.size(); ++i) {
    Vec plus = wd, minus = wd;
    plus[i] += h;
    minus[i] -= h;
    numeric[i] = (ParameterFreeStemLoss(plus, x, y) -
                  ParameterFreeStemLoss(minus, x, y)) /
                 (2 * h);
  }
  nn_test::ExpectNear(grad, numeric, 2e-4, "gradient");
}

TEST_P(GraphModelTest, OnReadyCoversTheGradientLastLayerFirst) {
  const int batch = 2;
  auto model = MakeTiny(batch);
  ASSERT_NE(model, nullptr);
  ASSERT_TRUE(model->SetWeights(model->InitialWeights(3)).ok());
  const auto x = nn_test::RandomFloats(batch * model->FeatureSize(), 4);
  const std::vector<int32_t> y = {1, 3};
  std::vector<float> plain(model->NumParameters());
  ASSERT_TRUE(model->ComputeGradients(x, y, absl::MakeSpan(plain)).ok());

  std::vector<float> streamed(model->NumParameters(), -7.0f);
  std::vector<std::pair<int64_t, int64_t>> ranges;
  auto stats = model->ComputeGradients(x, y, absl::MakeSpan(streamed),
                                       [&](int64_t begin, int64_t end) {
                                         // Final when announced.
                                         for (int64_t i = begin; i < end; ++i) {
                                           EXPECT_NE(streamed[i], -7.0f) << i;
                                         }
                                         ranges.push_back({begin, end});
                                       });
  ASSERT_TRUE(stats.ok()) << stats.status();
  // dense, bn, conv_c, conv_a: contiguous, descending, covering everything.
  const std::vector<std::pair<int64_t, int64_t>> want = {
      {147, 163}, {141, 147}, {57, 141}, {0, 57}};
  EXPECT_EQ(ranges, want);
  // Batch norm's statistics moved between the calls, not the gradients.
  EXPECT_EQ(streamed, plain);
}

TEST_P(GraphModelTest, EvaluateUsesMovingStatisticsAndSplits) {
  auto model = MakeTiny(2);
  ASSERT_NE(model, nullptr);
  ASSERT_TRUE(model->SetWeights(model->InitialWeights(5)).ok());
  const std::vector<float> state = {0.1f, -0.2f, 0.3f, 0.5f, 2.0f, 1.5f};
  ASSERT_TRUE(model->SetState(state).ok());
  const int rows = 5;
  const auto x = nn_test::RandomFloats(rows * model->FeatureSize(), 6);
  const std::vector<int32_t> y = {0, 1, 2, 3, 0};
  auto all = model->Evaluate(x, y);
  ASSERT_TRUE(all.ok()) << all.status();
  EXPECT_EQ(all->examples, rows);
  double sum = 0;
  for (int r = 0; r < rows; ++r) {
    auto one =
        model->Evaluate(absl::MakeConstSpan(x).subspan(r * model->FeatureSize(),
                                                       model->FeatureSize()),
                        absl::MakeConstSpan(y).subspan(r, 1));
    ASSERT_TRUE(one.ok());
    sum += one->loss_sum;
  }
  // Inference normalizes each example alone the same way as in a batch.
  EXPECT_NEAR(all->loss_sum, sum, 1e-5 * sum);
  std::vector<float> after(state.size());
  ASSERT_TRUE(model->State(absl::MakeSpan(after)).ok());
  EXPECT_EQ(after, state);
}

TEST_P(GraphModelTest, RejectsBadCallsWithoutSideEffects) {
  auto model = MakeTiny(2);
  ASSERT_NE(model, nullptr);
  const auto kInvalid = absl::StatusCode::kInvalidArgument;
  std::vector<float> grad(model->NumParameters());
  const auto x = nn_test::RandomFloats(2 * model->FeatureSize(), 1);
  EXPECT_EQ(model->SetWeights(std::vector<float>(3)).code(), kInvalid);
  EXPECT_EQ(model->SetState(std::vector<float>(5)).code(), kInvalid);
  std::vector<float> small(5);
  EXPECT_EQ(model->State(absl::MakeSpan(small)).code(), kInvalid);
  EXPECT_EQ(
      model->ComputeGradients(x, {}, absl::MakeSpan(grad)).status().code(),
      kInvalid);
  const std::vector<int32_t> three = {0, 1, 2};
  EXPECT_EQ(
      model->ComputeGradients(x, three, absl::MakeSpan(grad)).status().code(),
      kInvalid);
  std::vector<float> short_grad(grad.size() - 1);
  const std::vector<int32_t> two = {0, 1};
  EXPECT_EQ(model->ComputeGradients(x, two, absl::MakeSpan(short_grad))
                .status()
                .code(),
            kInvalid);
  const std::vector<int32_t> bad = {0, kClasses};
  EXPECT_EQ(
      model->ComputeGradients(x, bad, absl::MakeSpan(grad)).status().code(),
      kInvalid);
  // The bad batch never reached batch norm.
  std::vector<float> state(model->StateSize());
  ASSERT_TRUE(model->State(absl::MakeSpan(state)).ok());
  EXPECT_EQ(state, model->InitialState());
  EXPECT_EQ(
      model->Evaluate(absl::MakeConstSpan(x).subspan(1), two).status().code(),
      kInvalid);
  EXPECT_TRUE(model->ComputeGradients(x, two, absl::MakeSpan(grad)).ok());

  auto graph = TinyResidualGraph();
  ASSERT_TRUE(graph.ok());
  EXPECT_EQ(
      GraphModel::Create(*std::move(graph), 0, device_.get()).status().code(),
      kInvalid);
  GraphBuilder b({2, 2, 1});
  auto image_out = std::move(b).Finish(b.ReLU("r", b.input()));
  ASSERT_TRUE(image_out.ok());
  EXPECT_THAT(GraphModel::Create(*std::move(image_out), 1, device_.get())
                  .status()
                  .message(),
              HasSubstr("1x1xclasses"));
}

INSTANTIATE_TEST_SUITE_P(Devices, GraphModelTest,
                         ::testing::ValuesIn(nn_test::TestDevices()),
                         nn_test::DeviceName);

}  // namespace
}  // namespace lockstep
