// Learning-rate schedules (common/optim/lr_schedule.h): lr(step) against values
// worked out by hand, the checks of their settings, and their use by the
// optimizers and a parameter server's updates.
#include "common/optim/lr_schedule.h"

#include <cmath>
#include <memory>
#include <string>
#include <vector>

#include "absl/status/status.h"
#include "common/model/model_signature.h"
#include "common/optim/optimizer.h"
#include "gmock/gmock.h"
#include "gtest/gtest.h"
#include "server/core/parameter_server.h"
#include "tests/unit/chunk_reply_test_util.h"
#include "tests/unit/parameter_server_test_util.h"

namespace lockstep {
namespace {

using ::testing::HasSubstr;

constexpr double kPi = 3.14159265358979323846;

OptimizerConfig Sgd(double lr, LrSchedule schedule) {
  OptimizerConfig c = OptimizerConfig::Defaults("sgd");
  c.learning_rate = lr;
  c.schedule = std::move(schedule);
  return c;
}

LrSchedule Piecewise() {
  LrSchedule s;
  s.kind = "piecewise";
  s.boundaries = {2, 5};
  s.values = {1.0, 0.5, 0.25};
  return s;
}

TEST(LrScheduleTest, ConstantIsTheLearningRate) {
  const OptimizerConfig c = Sgd(0.0375, LrSchedule());
  ASSERT_TRUE(ValidateLrSchedule(c.schedule).ok());
  for (int64_t step : {0, 1, 999999})
    EXPECT_EQ(LearningRateAt(c, step), 0.0375);
}

// Keras's PiecewiseConstantDecay: values[0] up to and including the first
// boundary.
TEST(LrScheduleTest, PiecewiseSwitchesAfterEachBoundary) {
  const OptimizerConfig c = Sgd(0.001, Piecewise());
  ASSERT_TRUE(ValidateLrSchedule(c.schedule).ok());
  const double expected[] = {1.0, 1.0, 1.0, 0.5, 0.5, 0.5, 0.25, 0.25};
  for (int64_t step = 0; step < 8; ++step) {
    EXPECT_EQ(LearningRateAt(c, step), expected[step]) << "step " << step;
  }
  EXPECT_EQ(LearningRateAt(c, 1000000), 0.25);
}

// lr * decay_rate ^ (step / decay_steps); staircase floors the exponent.
TEST(LrScheduleTest, ExponentialDecay) {
  LrSchedule s;
  s.kind = "exponential";
  s.decay_steps = 10;
  s.decay_rate = 0.5;
  OptimizerConfig c = Sgd(0.1, s);
  ASSERT_TRUE(ValidateLrSchedule(c.schedule).ok());
  EXPECT_EQ(LearningRateAt(c, 0), 0.1);
  EXPECT_EQ(LearningRateAt(c, 10), 0.05);
  EXPECT_EQ(LearningRateAt(c, 20), 0.025);
  EXPECT_NEAR(LearningRateAt(c, 5), 0.1 * std::sqrt(0.5), 1e-15);
  EXPECT_NEAR(LearningRateAt(c, 15), 0.05 * std::sqrt(0.5), 1e-15);
  c.schedule.staircase = true;
  EXPECT_EQ(LearningRateAt(c, 9), 0.1);
  EXPECT_EQ(LearningRateAt(c, 15), 0.05);
  EXPECT_EQ(LearningRateAt(c, 29), 0.025);
}

// lr * ((1 - alpha) * 0.5 * (1 + cos(pi * min(step, D) / D)) + alpha).
TEST(LrScheduleTest, CosineDecayEndsAtAlpha) {
  LrSchedule s;
  s.kind = "cosine";
  s.decay_steps = 4;
  s.alpha = 0.1;
  const OptimizerConfig c = Sgd(0.2, s);
  ASSERT_TRUE(ValidateLrSchedule(c.schedule).ok());
  EXPECT_NEAR(LearningRateAt(c, 0), 0.2, 1e-15);
  EXPECT_NEAR(LearningRateAt(c, 1),
              0.2 * (0.9 * 0.5 * (1 + std::cos(kPi / 4)) + 0.1), 1e-15);
  EXPECT_NEAR(LearningRateAt(c, 2), 0.2 * (0.9 * 0.5 + 0.1), 1e-15);
  EXPECT_NEAR(LearningRateAt(c, 4), 0.02, 1e-15);
  EXPECT_NEAR(LearningRateAt(c, 400), 0.02, 1e-15);
}

// Keras 3's CosineDecay(initial_learning_rate=0.01, decay_steps=10,
// warmup_target=0.1, warmup_steps=5): from 0.01 up to 0.1 in 5 steps, then
// the cosine from 0.1.
TEST(LrScheduleTest, WarmupLeadsLinearlyIntoTheSchedule) {
  LrSchedule s;
  s.kind = "cosine";
  s.decay_steps = 10;
  s.warmup_steps = 5;
  s.warmup_from = 0.01;
  const OptimizerConfig c = Sgd(0.1, s);
  ASSERT_TRUE(ValidateLrSchedule(c.schedule).ok());
  EXPECT_EQ(LearningRateAt(c, 0), 0.01);
  for (int64_t step = 1; step < 5; ++step) {
    EXPECT_NEAR(LearningRateAt(c, step), 0.01 + (0.1 - 0.01) * step / 5.0,
                1e-15);
  }
  EXPECT_NEAR(LearningRateAt(c, 5), 0.1, 1e-15);
  EXPECT_NEAR(LearningRateAt(c, 10), 0.1 * 0.5, 1e-15);
  EXPECT_NEAR(LearningRateAt(c, 15), 0.0, 1e-15);
  // In front of a piecewise schedule: up to its first value, from 0.
  LrSchedule p = Piecewise();
  p.warmup_steps = 4;
  const OptimizerConfig w = Sgd(0.001, p);
  ASSERT_TRUE(ValidateLrSchedule(w.schedule).ok());
  const double expected[] = {0.0, 0.25, 0.5, 0.75, 1.0, 1.0, 1.0, 0.5};
  for (int64_t step = 0; step < 8; ++step) {
    EXPECT_EQ(LearningRateAt(w, step), expected[step]) << "step " << step;
  }
}

TEST(LrScheduleTest, BadSettingsAreNamed) {
  const auto error = [](LrSchedule s) {
    return std::string(ValidateLrSchedule(s, "--lr_").message());
  };
  LrSchedule s;
  s.kind = "linear";
  EXPECT_EQ(error(s),
            "--lr_schedule must be constant, exponential, piecewise or "
            "cosine, got \"linear\"");
  s = Piecewise();
  s.values.pop_back();
  EXPECT_EQ(error(s),
            "--lr_values must list one rate more than the 2 boundaries, got 2 "
            "(piecewise schedule)");
  s = Piecewise();
  s.boundaries = {5, 5};
  EXPECT_THAT(error(s), HasSubstr("--lr_boundaries must be non-negative and "
                                  "increasing"));
  s = Piecewise();
  s.decay_rate = 0.5;
  EXPECT_EQ(error(s),
            "--lr_decay_rate is not used by this kind (piecewise schedule)");
  s = LrSchedule();
  s.kind = "exponential";
  s.decay_rate = 0.5;
  EXPECT_EQ(error(s),
            "--lr_decay_steps must be at least 1, got 0 (exponential "
            "schedule)");
  s.decay_steps = 3;
  s.decay_rate = -1;
  EXPECT_THAT(error(s), HasSubstr("--lr_decay_rate must be positive"));
  s = LrSchedule();
  s.warmup_from = 0.5;
  EXPECT_EQ(error(s),
            "--lr_warmup_from is not used without warmup steps "
            "(constant schedule)");
  s = LrSchedule();
  s.kind = "cosine";
  s.decay_steps = 3;
  s.alpha = 1.5;
  EXPECT_THAT(std::string(ValidateLrSchedule(s).message()),
              HasSubstr("alpha must be in [0, 1], got 1.5"));
  // The optimizers refuse what the check refuses.
  EXPECT_EQ(Optimizer::Create(Sgd(0.1, s), 4).status().code(),
            absl::StatusCode::kInvalidArgument);
}

// Each step's update uses that step's rate, rounded to fp32 once:
// w -= float(lr(step)) * g.
TEST(LrScheduleTest, SgdAppliesTheRateOfEachStep) {
  auto sgd = Optimizer::Create(Sgd(0.001, Piecewise()), 2);
  ASSERT_TRUE(sgd.ok()) << sgd.status();
  std::vector<float> w = {1.0f, -2.0f};
  const std::vector<float> g = {0.5f, 0.25f};
  std::vector<float> expected = w;
  for (int64_t step = 0; step < 8; ++step) {
    const float lr = static_cast<float>(LearningRateAt((*sgd)->config(), step));
    for (int i = 0; i < 2; ++i) expected[i] = expected[i] - lr * g[i];
    (*sgd)->Apply(step, 0, absl::MakeSpan(w), g);
    ASSERT_EQ(w, expected) << "step " << step;
  }
  EXPECT_EQ(w[0], 1.0f - 3 * 0.5f - 3 * 0.25f - 2 * 0.125f);
}

// Adam at step t with a schedule is Adam with the constant rate lr(t).
TEST(LrScheduleTest, AdamUsesTheScheduledRate) {
  LrSchedule s;
  s.kind = "exponential";
  s.decay_steps = 2;
  s.decay_rate = 0.3;
  OptimizerConfig scheduled = OptimizerConfig::Defaults("adamw");
  scheduled.schedule = s;
  OptimizerConfig constant = OptimizerConfig::Defaults("adamw");
  constant.learning_rate = LearningRateAt(scheduled, 3);
  ASSERT_NE(constant.learning_rate, scheduled.learning_rate);
  auto a = Optimizer::Create(scheduled, 3);
  auto b = Optimizer::Create(constant, 3);
  ASSERT_TRUE(a.ok() && b.ok());
  std::vector<float> wa = {0.5f, -1.5f, 2.0f}, wb = wa;
  const std::vector<float> g = {0.125f, -0.75f, 3.0f};
  (*a)->Apply(3, 0, absl::MakeSpan(wa), g);
  (*b)->Apply(3, 0, absl::MakeSpan(wb), g);
  EXPECT_NE(wa[0], 0.5f);
  EXPECT_EQ(wa, wb);
}

// The server applies w - lr(step) * mean(g) with the schedule of the job's
// signature, and refuses a worker whose schedule differs.
TEST(LrScheduleServerTest, ServerUpdatesFollowThePiecewiseSchedule) {
  auto ps = ParameterServer::Create({/*num_workers=*/1});
  ASSERT_TRUE(ps.ok());
  ModelSignature signature = SmallSignature(1);
  signature.optimizer.schedule = Piecewise();
  auto r0 = (*ps)->Register(0, signature);
  ASSERT_TRUE(r0.ok()) << r0.status();
  std::vector<float> w = {1, 2, 3, 4, 5};
  ASSERT_TRUE((*ps)->Initialize(0, r0->incarnation, 0, Bytes(w)).ok());
  const std::vector<float> g = {0.5f, -1.0f, 2.0f, 0.25f, 4.0f};
  const float lr[] = {1.0f, 1.0f, 1.0f, 0.5f, 0.5f, 0.5f, 0.25f};
  for (int64_t step = 0; step < 7; ++step) {
    Reply reply;
    (*ps)->Push(0, r0->incarnation, step, 0, WireDType::kFloat32, Bytes(g),
                reply.Callback());
    ASSERT_TRUE(reply.ok()) << "step " << step;
    for (int i = 0; i < 5; ++i) w[i] = w[i] - lr[step] * g[i];
    EXPECT_EQ(reply.values(), w) << "step " << step;
    EXPECT_EQ(reply.version(), step + 1);
  }

  ModelSignature other = signature;
  other.optimizer.schedule.values[2] = 0.125;
  auto refused = (*ps)->Register(0, other);
  EXPECT_EQ(refused.status().code(), absl::StatusCode::kFailedPrecondition);
  EXPECT_THAT(std::string(refused.status().message()),
              HasSubstr("values=[1,0.5,0.25]"));
  EXPECT_THAT(std::string(refused.status().message()),
              HasSubstr("values=[1,0.5,0.125]"));
  EXPECT_TRUE((*ps)->Register(0, signature).ok());
}

}  // namespace
}  // namespace lockstep
