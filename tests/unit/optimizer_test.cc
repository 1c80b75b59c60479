#include "common/optim/optimizer.h"

#include <algorithm>
#include <cmath>
#include <cstdint>
#include <iterator>
#include <limits>
#include <memory>
#include <string>
#include <utility>
#include <vector>

#include "absl/status/status.h"
#include "absl/status/statusor.h"
#include "absl/types/span.h"
#include "common/base/random.h"
#include "common/model/model_signature.h"
#include "gmock/gmock.h"
#include "gtest/gtest.h"
#include "tests/unit/optimizer_test_util.h"

namespace lockstep {
namespace {

using ::testing::HasSubstr;

// Expected values are worked out in double; the optimizer runs in fp32, so
// they agree to a few fp32 ulps (about 1e-7 relative each).
constexpr double kRelTol = 1e-6;
double Tol(double expected) { return kRelTol * std::abs(expected); }

OptimizerConfig Config(const std::string& name, double learning_rate) {
  OptimizerConfig config = OptimizerConfig::Defaults(name);
  config.learning_rate = learning_rate;
  return config;
}

// Runs the three gradients kG0..kG2 (or the first `steps` of them) on kW.
std::vector<float> RunSteps(Optimizer& optimizer, int steps) {
  std::vector<float> w(std::begin(kW), std::end(kW));
  const float* gradients[] = {kG0, kG1, kG2};
  for (int step = 0; step < steps; ++step) {
    optimizer.Apply(step, /*offset=*/0, absl::MakeSpan(w),
                    absl::MakeConstSpan(gradients[step], 2));
  }
  return w;
}

absl::Span<float> SlotNamed(Optimizer& optimizer, const std::string& name) {
  for (auto& [slot_name, slot] : optimizer.Slots()) {
    if (slot_name == name) return slot;
  }
  ADD_FAILURE() << "no slot " << name;
  return {};
}

TEST(OptimizerTest, SgdMatchesHandComputedSteps) {
  std::unique_ptr<Optimizer> sgd = Make(Config("sgd", 0.1), 2);
  ASSERT_NE(sgd, nullptr);
  std::vector<float> w = RunSteps(*sgd, 2);

  // w -= lr * g, twice.
  const double a1 = 0.359375 - 0.1 * 0.8125;      // 0.278125
  const double a2 = a1 - 0.1 * 0.4375;            // 0.234375
  const double b1 = -1.421875 - 0.1 * -0.265625;  // -1.3953125
  const double b2 = b1 - 0.1 * -0.640625;         // -1.33125
  EXPECT_NEAR(w[0], a2, Tol(a2));
  EXPECT_NEAR(w[1], b2, Tol(b2));
}

TEST(OptimizerTest, MomentumMatchesHandComputedSteps) {
  OptimizerConfig config = Config("momentum", 0.05);
  ASSERT_EQ(config.momentum, 0.9);
  std::unique_ptr<Optimizer> momentum = Make(config, 2);
  ASSERT_NE(momentum, nullptr);
  std::vector<float> w = RunSteps(*momentum, 3);

  // v = 0.9 * v - 0.05 * g;  w += v.
  const double va1 = 0.9 * 0.0 - 0.05 * 0.8125;  // -0.040625
  const double wa1 = 0.359375 + va1;
  const double va2 = 0.9 * va1 - 0.05 * 0.4375;  // -0.0584375
  const double wa2 = wa1 + va2;
  const double va3 = 0.9 * va2 - 0.05 * 1.15625;    // -0.11040625
  const double wa3 = wa2 + va3;                     // 0.14990625
  const double vb1 = 0.9 * 0.0 - 0.05 * -0.265625;  // 0.01328125
  const double wb1 = -1.421875 + vb1;
  const double vb2 = 0.9 * vb1 - 0.05 * -0.640625;  // 0.043984375
  const double wb2 = wb1 + vb2;
  const double vb3 = 0.9 * vb2 - 0.05 * 0.09375;  // 0.0348984375
  const double wb3 = wb2 + vb3;                   // -1.3297109375
  EXPECT_NEAR(w[0], wa3, Tol(wa3));
  EXPECT_NEAR(w[1], wb3, Tol(wb3));
  absl::Span<float> v = SlotNamed(*momentum, "momentum");
  ASSERT_EQ(v.size(), 2u);
  EXPECT_NEAR(v[0], va3, Tol(va3));
  EXPECT_NEAR(v[1], vb3, Tol(vb3));
}

TEST(OptimizerTest, NesterovMatchesHandComputedSteps) {
  OptimizerConfig config = Config("momentum", 0.05);
  config.nesterov = true;
  std::unique_ptr<Optimizer> nesterov = Make(config, 2);
  ASSERT_NE(nesterov, nullptr);
  std::vector<float> w = RunSteps(*nesterov, 3);

  // v = 0.9 * v - 0.05 * g;  w += 0.9 * v - 0.05 * g (with the new v).
  const double va1 = 0.9 * 0.0 - 0.05 * 0.8125;
  const double wa1 = 0.359375 + 0.9 * va1 - 0.05 * 0.8125;
  const double va2 = 0.9 * va1 - 0.05 * 0.4375;
  const double wa2 = wa1 + 0.9 * va2 - 0.05 * 0.4375;
  const double va3 = 0.9 * va2 - 0.05 * 1.15625;
  const double wa3 = wa2 + 0.9 * va3 - 0.05 * 1.15625;  // 0.050540625
  const double vb1 = 0.9 * 0.0 - 0.05 * -0.265625;
  const double wb1 = -1.421875 + 0.9 * vb1 - 0.05 * -0.265625;
  const double vb2 = 0.9 * vb1 - 0.05 * -0.640625;
  const double wb2 = wb1 + 0.9 * vb2 - 0.05 * -0.640625;
  const double vb3 = 0.9 * vb2 - 0.05 * 0.09375;
  const double wb3 = wb2 + 0.9 * vb3 - 0.05 * 0.09375;  // -1.29830234375
  EXPECT_NEAR(w[0], wa3, Tol(wa3));
  EXPECT_NEAR(w[1], wb3, Tol(wb3));
  absl::Span<float> v = SlotNamed(*nesterov, "momentum");
  ASSERT_EQ(v.size(), 2u);
  EXPECT_NEAR(v[0], va3, Tol(va3));
  EXPECT_NEAR(v[1], vb3, Tol(vb3));
}

TEST(OptimizerTest, SgdAppliesDecoupledWeightDecayBeforeTheStep) {
  OptimizerConfig config = Config("sgd", 0.1);
  config.weight_decay = 0.25;
  std::unique_ptr<Optimizer> sgd = Make(config, 2);
  ASSERT_NE(sgd, nullptr);
  std::vector<float> w = RunSteps(*sgd, 1);

  // w -= w * 0.25 * 0.1, then w -= 0.1 * g.
  const double a1 = 0.359375 - 0.359375 * 0.25 * 0.1 - 0.1 * 0.8125;
  const double b1 = -1.421875 - -1.421875 * 0.25 * 0.1 - 0.1 * -0.265625;
  EXPECT_NEAR(w[0], a1, Tol(a1));
  EXPECT_NEAR(w[1], b1, Tol(b1));
}

TEST(OptimizerTest, AdamMatchesHandComputedSteps) {
  std::unique_ptr<Optimizer> adam = Make(Config("adam", 0.01), 2);
  ASSERT_NE(adam, nullptr);
  std::vector<float> w = RunSteps(*adam, 3);

  // b1 = 0.9, b2 = 0.999, eps = 1e-7 (Keras defaults).
  // alpha_t = lr * sqrt(1 - b2^t) / (1 - b1^t).
  const double alpha1 = 0.01 * std::sqrt(1 - 0.999) / (1 - 0.9);
  const double alpha2 = 0.01 * std::sqrt(1 - 0.999 * 0.999) / (1 - 0.9 * 0.9);
  const double alpha3 =
      0.01 * std::sqrt(1 - 0.999 * 0.999 * 0.999) / (1 - 0.9 * 0.9 * 0.9);
  // m = 0.9 m + 0.1 g;  v = 0.999 v + 0.001 g^2;
  // w -= alpha * m / (sqrt(v) + 1e-7).
  const double ma1 = 0.1 * 0.8125;
  const double sa1 = 0.001 * 0.8125 * 0.8125;
  const double wa1 = 0.359375 - alpha1 * ma1 / (std::sqrt(sa1) + 1e-7);
  const double ma2 = 0.9 * ma1 + 0.1 * 0.4375;
  const double sa2 = 0.999 * sa1 + 0.001 * 0.4375 * 0.4375;
  const double wa2 = wa1 - alpha2 * ma2 / (std::sqrt(sa2) + 1e-7);
  const double ma3 = 0.9 * ma2 + 0.1 * 1.15625;
  const double sa3 = 0.999 * sa2 + 0.001 * 1.15625 * 1.15625;
  const double wa3 = wa2 - alpha3 * ma3 / (std::sqrt(sa3) + 1e-7);
  const double mb1 = 0.1 * -0.265625;
  const double sb1 = 0.001 * -0.265625 * -0.265625;
  const double wb1 = -1.421875 - alpha1 * mb1 / (std::sqrt(sb1) + 1e-7);
  const double mb2 = 0.9 * mb1 + 0.1 * -0.640625;
  const double sb2 = 0.999 * sb1 + 0.001 * -0.640625 * -0.640625;
  const double wb2 = wb1 - alpha2 * mb2 / (std::sqrt(sb2) + 1e-7);
  const double mb3 = 0.9 * mb2 + 0.1 * 0.09375;
  const double sb3 = 0.999 * sb2 + 0.001 * 0.09375 * 0.09375;
  const double wb3 = wb2 - alpha3 * mb3 / (std::sqrt(sb3) + 1e-7);
  EXPECT_NEAR(w[0], wa3, Tol(wa3));
  EXPECT_NEAR(w[1], wb3, Tol(wb3));
  absl::Span<float> m = SlotNamed(*adam, "m");
  absl::Span<float> v = SlotNamed(*adam, "v");
  ASSERT_EQ(m.size(), 2u);
  ASSERT_EQ(v.size(), 2u);
  EXPECT_NEAR(m[0], ma3, Tol(ma3));
  EXPECT_NEAR(m[1], mb3, Tol(mb3));
  EXPECT_NEAR(v[0], sa3, Tol(sa3));
  EXPECT_NEAR(v[1], sb3, Tol(sb3));
}

TEST(OptimizerTest, AdamFirstStepIsLearningRateTimesSignOfGradient) {
  // At t = 1 bias correction makes m_hat = g and v_hat = g^2, so the step is
  // lr * g / (|g| + eps'): lr * sign(g) up to eps'/|g| <= 5e-5 here.
  const std::vector<float> g = {3.5f, -0.75f, 120.0f, -0.0625f};
  std::unique_ptr<Optimizer> adam = Make(OptimizerConfig::Defaults("adam"), 4);
  ASSERT_NE(adam, nullptr);
  std::vector<float> w(4, 0.0f);
  adam->Apply(/*step=*/0, /*offset=*/0, absl::MakeSpan(w), g);
  const double lr = 0.001;
  EXPECT_NEAR(w[0], -lr, 1e-4 * lr);
  EXPECT_NEAR(w[1], +lr, 1e-4 * lr);
  EXPECT_NEAR(w[2], -lr, 1e-4 * lr);
  EXPECT_NEAR(w[3], +lr, 1e-4 * lr);
}

TEST(OptimizerTest, AdamBiasCorrectionFollowsTheStepArgument) {
  // A fresh optimizer (a restarted shard) at step 9 corrects for t = 10.
  std::unique_ptr<Optimizer> adam = Make(Config("adam", 0.01), 2);
  ASSERT_NE(adam, nullptr);
  std::vector<float> w(std::begin(kW), std::end(kW));
  adam->Apply(/*step=*/9, /*offset=*/0, absl::MakeSpan(w), kG0);

  const double alpha10 =
      0.01 * std::sqrt(1 - std::pow(0.999, 10)) / (1 - std::pow(0.9, 10));
  const double ma = 0.1 * 0.8125;
  const double sa = 0.001 * 0.8125 * 0.8125;
  const double wa = 0.359375 - alpha10 * ma / (std::sqrt(sa) + 1e-7);
  const double mb = 0.1 * -0.265625;
  const double sb = 0.001 * -0.265625 * -0.265625;
  const double wb = -1.421875 - alpha10 * mb / (std::sqrt(sb) + 1e-7);
  EXPECT_NEAR(w[0], wa, Tol(wa));
  EXPECT_NEAR(w[1], wb, Tol(wb));
}

TEST(OptimizerTest, AdamWDecaysBeforeTheAdamStep) {
  OptimizerConfig config = Config("adamw", 0.01);
  config.weight_decay = 0.5;
  std::unique_ptr<Optimizer> adamw = Make(config, 2);
  ASSERT_NE(adamw, nullptr);
  std::vector<float> w = RunSteps(*adamw, 2);

  // w -= w * 0.5 * 0.01, then the Adam step. Decaying after the step instead
  // would differ by about update * 0.005, i.e. 5e-5: far above tolerance.
  const double alpha1 = 0.01 * std::sqrt(1 - 0.999) / (1 - 0.9);
  const double alpha2 = 0.01 * std::sqrt(1 - 0.999 * 0.999) / (1 - 0.9 * 0.9);
  const double ma1 = 0.1 * 0.8125;
  const double sa1 = 0.001 * 0.8125 * 0.8125;
  const double da1 = 0.359375 - 0.359375 * 0.5 * 0.01;
  const double wa1 = da1 - alpha1 * ma1 / (std::sqrt(sa1) + 1e-7);
  const double ma2 = 0.9 * ma1 + 0.1 * 0.4375;
  const double sa2 = 0.999 * sa1 + 0.001 * 0.4375 * 0.4375;
  const double da2 = wa1 - wa1 * 0.5 * 0.01;
  const double wa2 = da2 - alpha2 * ma2 / (std::sqrt(sa2) + 1e-7);
  const double mb1 = 0.1 * -0.265625;
  const double sb1 = 0.001 * -0.265625 * -0.265625;
  const double db1 = -1.421875 - -1.421875 * 0.5 * 0.01;
  const double wb1 = db1 - alpha1 * mb1 / (std::sqrt(sb1) + 1e-7);
  const double mb2 = 0.9 * mb1 + 0.1 * -0.640625;
  const double sb2 = 0.999 * sb1 + 0.001 * -0.640625 * -0.640625;
  const double db2 = wb1 - wb1 * 0.5 * 0.01;
  const double wb2 = db2 - alpha2 * mb2 / (std::sqrt(sb2) + 1e-7);
  EXPECT_NEAR(w[0], wa2, Tol(wa2));
  EXPECT_NEAR(w[1], wb2, Tol(wb2));
}

TEST(OptimizerTest, RejectsInvalidSettings) {
  const double kNaN = std::numeric_limits<double>::quiet_NaN();
  const double kInf = std::numeric_limits<double>::infinity();
  struct Case {
    OptimizerConfig config;
    int64_t num_parameters;
    std::string setting;  // Named in the message.
  };
  auto adam_with = [](auto mutate) {
    OptimizerConfig config = OptimizerConfig::Defaults("adam");
    mutate(config);
    return config;
  };
  const Case cases[] = {
      {adam_with([](OptimizerConfig& c) { c.name = "rmsprop"; }), 1, "rmsprop"},
      {adam_with([](OptimizerConfig& c) { c.name = ""; }), 1, "unknown"},
      {adam_with([](OptimizerConfig& c) { c.learning_rate = 0; }), 1,
       "learning_rate"},
      {adam_with([](OptimizerConfig& c) { c.learning_rate = -1; }), 1,
       "learning_rate"},
      {adam_with([=](OptimizerConfig& c) { c.learning_rate = kNaN; }), 1,
       "learning_rate"},
      {adam_with([=](OptimizerConfig& c) { c.learning_rate = kInf; }), 1,
       "learning_rate"},
      {adam_with([](OptimizerConfig& c) { c.beta_1 = 1; }), 1, "beta_1"},
      {adam_with([](OptimizerConfig& c) { c.beta_1 = -0.1; }), 1, "beta_1"},
      {adam_with([](OptimizerConfig& c) { c.beta_2 = 1; }), 1, "beta_2"},
      {adam_with([=](OptimizerConfig& c) { c.beta_2 = kNaN; }), 1, "beta_2"},
      {adam_with([](OptimizerConfig& c) { c.epsilon = 0; }), 1, "epsilon"},
      {adam_with([](OptimizerConfig& c) { c.epsilon = -1e-7; }), 1, "epsilon"},
      {adam_with([](OptimizerConfig& c) {
         c.name = "adamw";
         c.weight_decay = -0.004;
       }),
       1, "weight_decay"},
      {adam_with([=](OptimizerConfig& c) { c.weight_decay = kNaN; }), 1,
       "weight_decay"},
      {adam_with([](OptimizerConfig& c) {
         c.name = "momentum";
         c.momentum = 1;
       }),
       1, "momentum"},
      {adam_with([](OptimizerConfig& c) {
         c.name = "sgd";
         c.momentum = -0.5;
       }),
       1, "momentum"},
      {OptimizerConfig::Defaults("sgd"), -1, "num_parameters"},
  };
  for (const Case& c : cases) {
    SCOPED_TRACE(c.setting);
    absl::StatusOr<std::unique_ptr<Optimizer>> optimizer =
        Optimizer::Create(c.config, c.num_parameters);
    EXPECT_EQ(optimizer.status().code(), absl::StatusCode::kInvalidArgument);
    EXPECT_THAT(optimizer.status().message(), HasSubstr(c.setting));
  }
}

TEST(OptimizerTest, InvalidMessageNamesSettingAndValue) {
  OptimizerConfig config = OptimizerConfig::Defaults("sgd");
  config.learning_rate = -1;
  EXPECT_EQ(Optimizer::Create(config, 3).status(),
            absl::InvalidArgumentError(
                "learning_rate must be positive and finite, got -1"));
}

TEST(OptimizerTest, AcceptsKerasDefaultsAndEmptyModel) {
  for (const char* name : {"sgd", "momentum", "adam", "adamw"}) {
    SCOPED_TRACE(name);
    EXPECT_TRUE(Optimizer::Create(OptimizerConfig::Defaults(name), 0).ok());
    EXPECT_TRUE(Optimizer::Create(OptimizerConfig::Defaults(name), 1000).ok());
  }
}

TEST(OptimizerTest, AverageMakesTheMeanGradientTheNewValues) {
  // The summation mode: what the servers publish is the scaled sum itself,
  // whatever the weights were, and nothing is kept between steps.
  std::unique_ptr<Optimizer> average =
      Make(Config(OptimizerConfig::kAverage, 0.1), 3);
  ASSERT_NE(average, nullptr);
  EXPECT_TRUE(average->Slots().empty());
  const std::vector<float> from = {7.0f, -7.0f, 100.0f};
  const std::vector<float> sum = {3.0f, -1.0f, 0.25f};
  std::vector<float> to(3, 42.0f);
  average->ApplyMean(/*step=*/5, /*offset=*/0, absl::MakeConstSpan(from),
                     absl::MakeSpan(to), absl::MakeConstSpan(sum), 0.5f);
  EXPECT_EQ(to, (std::vector<float>{1.5f, -0.5f, 0.125f}));
  // A slice at an offset, in place.
  std::vector<float> w = {1.0f, 2.0f};
  average->ApplyMean(0, /*offset=*/1, absl::MakeConstSpan(w), absl::MakeSpan(w),
                     absl::MakeConstSpan(sum.data(), 2), 0.25f);
  EXPECT_EQ(w, (std::vector<float>{0.75f, -0.25f}));
}

TEST(OptimizerTest, AverageIsNoFlagsOptimizer) {
  // Only the Python summation mode asks for it: a worker flag cannot.
  EXPECT_FALSE(OptimizerConfig::IsName(OptimizerConfig::kAverage));
  EXPECT_TRUE(OptimizerConfig::IsServerName(OptimizerConfig::kAverage));
  EXPECT_TRUE(OptimizerConfig::IsServerName("adamw"));
  EXPECT_FALSE(OptimizerConfig::IsServerName("sum"));
}

}  // namespace
}  // namespace lockstep
