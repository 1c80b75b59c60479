#include "worker/model/nn/batch_normalization.h"

#include <cmath>
#include <memory>
#include <vector>

#include "gtest/gtest.h"
#include "tests/unit/nn_test_util.h"

namespace lockstep {
namespace {

using nn_test::Vec;

BatchNormOptions Options(float momentum, float epsilon) {
  BatchNormOptions o;
  o.momentum = momentum;
  o.epsilon = epsilon;
  return o;
}

// gamma around 1, beta around 0, as after a little training.
std::vector<float> Params(int channels, uint64_t seed) {
  std::vector<float> p = nn_test::RandomFloats(2 * channels, seed, -0.5f, 0.5f);
  for (int c = 0; c < channels; ++c) p[c] += 1.0f;
  return p;
}

using BatchNormalizationTest = nn_test::OnEachDevice;

TEST_P(BatchNormalizationTest, KerasTensorsAndDefaults) {
  auto bn = BatchNormalization::Create("bn", {3, 2, 5}, {});
  ASSERT_TRUE(bn.ok()) << bn.status();
  EXPECT_EQ((*bn)->options().momentum, 0.99f);
  EXPECT_EQ((*bn)->options().epsilon, 1e-3f);
  EXPECT_EQ((*bn)->output_shape(), (TensorShape{3, 2, 5}));
  const auto params = (*bn)->Parameters();
  ASSERT_EQ(params.size(), 2u);
  EXPECT_EQ(params[0].name, "gamma");
  EXPECT_EQ(params[0].initializer, Initializer::kOnes);
  EXPECT_EQ(params[1].name, "beta");
  EXPECT_EQ(params[1].initializer, Initializer::kZeros);
  const auto states = (*bn)->States();
  ASSERT_EQ(states.size(), 2u);
  EXPECT_EQ(states[0].name, "moving_mean");
  EXPECT_EQ(states[0].shape, (std::vector<int64_t>{5}));
  EXPECT_EQ(states[0].initializer, Initializer::kZeros);
  EXPECT_EQ(states[1].name, "moving_variance");
  EXPECT_EQ(states[1].initializer, Initializer::kOnes);
  EXPECT_EQ((*bn)->NumParameters(), 10);
  EXPECT_EQ((*bn)->NumStates(), 10);

  EXPECT_FALSE(
      BatchNormalization::Create("bn", {2, 2, 2}, Options(1.5f, 1e-3f)).ok());
  EXPECT_FALSE(
      BatchNormalization::Create("bn", {2, 2, 2}, Options(0.9f, 0.0f)).ok());
}

TEST_P(BatchNormalizationTest, TrainingForwardAndGradientsMatchReference) {
  struct Case {
    int batch;
    TensorShape shape;
    float offset;  // Added to x: the variance must survive a large mean.
  };
  const Case cases[] = {{3, {3, 2, 5}, 0.0f},
                        {2, {1, 1, 7}, 0.0f},
                        {4, {2, 3, 3}, 20.0f},
                        {1, {5, 3, 2}, -3.0f}};
  uint64_t seed = 10;
  for (const Case& c : cases) {
    SCOPED_TRACE(c.shape.ToString());
    const BatchNormOptions options = Options(0.99f, 1e-3f);
    auto bn = BatchNormalization::Create("bn", c.shape, options);
    ASSERT_TRUE(bn.ok());
    const int channels = c.shape.channels;
    const int rows = static_cast<int>(c.batch * c.shape.size() / channels);
    std::vector<float> x =
        nn_test::RandomFloats(c.batch * c.shape.size(), ++seed);
    for (float& v : x) v += c.offset;
    const std::vector<float> p = Params(channels, ++seed);
    std::vector<float> state(2 * channels, 0.0f);
    for (int ch = 0; ch < channels; ++ch) state[channels + ch] = 1.0f;
    const double eps = options.epsilon;
    nn_test::CheckLayer(
        *device_, **bn, c.batch, {x}, p, state,
        [=](const std::vector<Vec>& in, const Vec& pd) {
          return nn_test::RefBatchNormTraining(
              in[0], rows, channels, nn_test::Slice(pd, 0, channels),
              nn_test::Slice(pd, channels, channels), eps);
        },
        /*training=*/true, /*forward_tol=*/2e-5, /*grad_tol=*/2e-4);
  }
}

TEST_P(BatchNormalizationTest, TrainingMovesTheMovingStatistics) {
  const int batch = 3, channels = 4;
  const TensorShape shape = {2, 3, channels};
  const BatchNormOptions options = Options(0.9f, 1e-3f);
  auto bn = BatchNormalization::Create("bn", shape, options);
  ASSERT_TRUE(bn.ok());
  const std::vector<float> x =
      nn_test::RandomFloats(batch * shape.size(), 3, -2.0f, 3.0f);
  const std::vector<float> p = Params(channels, 4);
  std::vector<float> state = nn_test::RandomFloats(2 * channels, 5, 0.1f, 2.0f);
  const auto got =
      nn_test::RunLayer(*device_, **bn, batch, {x}, p, state, {}, true);

  const int rows = batch * 2 * 3;
  Vec mean, var;
  nn_test::RefBatchNormTraining(nn_test::ToDouble(x), rows, channels,
                                Vec(channels, 1.0), Vec(channels, 0.0), 1e-3,
                                &mean, &var);
  Vec want(2 * channels);
  for (int c = 0; c < channels; ++c) {
    // Keras: moving = momentum * moving + (1 - momentum) * batch, with the
    // biased batch variance.
    want[c] = 0.9 * state[c] + 0.1 * mean[c];
    want[channels + c] = 0.9 * state[channels + c] + 0.1 * var[c];
  }
  nn_test::ExpectNear(got.state, want, 1e-6, "moving statistics");
}

TEST_P(BatchNormalizationTest, InferenceUsesTheMovingStatistics) {
  const int batch = 2, channels = 3;
  const TensorShape shape = {3, 1, channels};
  auto bn = BatchNormalization::Create("bn", shape, Options(0.99f, 1e-3f));
  ASSERT_TRUE(bn.ok());
  const std::vector<float> x = nn_test::RandomFloats(batch * shape.size(), 6);
  const std::vector<float> p = Params(channels, 7);
  const std::vector<float> state = {0.5f, -0.25f, 0.0f, 2.0f, 0.5f, 1.0f};
  const auto got =
      nn_test::RunLayer(*device_, **bn, batch, {x}, p, state, {}, false);
  Vec want(x.size());
  for (size_t i = 0; i < x.size(); ++i) {
    const int c = static_cast<int>(i % channels);
    want[i] = p[c] * (x[i] - state[c]) / std::sqrt(state[channels + c] + 1e-3) +
              p[channels + c];
  }
  nn_test::ExpectNear(got.output, want, 1e-6, "inference output");
  EXPECT_EQ(got.state, state);  // Inference leaves the statistics alone.

  // A hand-computed value: gamma 1, beta 0, mean 0.5, variance 2.
  auto one =
      BatchNormalization::Create("one", {1, 1, 1}, Options(0.99f, 1e-3f));
  ASSERT_TRUE(one.ok());
  const auto y = nn_test::RunLayer(*device_, **one, 1, {{2.5f}}, {1.0f, 0.0f},
                                   {0.5f, 2.0f}, {}, false);
  EXPECT_NEAR(y.output[0], 2.0 / std::sqrt(2.001), 1e-6);
}

TEST_P(BatchNormalizationTest, BackwardNeedsATrainingPass) {
  const TensorShape shape = {1, 1, 2};
  auto bn = BatchNormalization::Create("bn", shape, {});
  ASSERT_TRUE(bn.ok());
  ASSERT_TRUE((*bn)->Prepare(device_.get(), 2).ok());
  auto buffer = device_->Allocate(64 * sizeof(float));
  ASSERT_TRUE(buffer.ok());
  float* mem = (*buffer)->As<float>();  // Device memory: never read here.
  const float* inputs[] = {mem};
  float* grads[] = {mem + 8};
  // Moving variance 1 in the state (mem + 20 .. 23).
  std::vector<float> init(64, 0.0f);
  init[22] = init[23] = 1.0f;
  ASSERT_TRUE(
      device_->CopyToDevice(init.data(), mem, init.size() * sizeof(float))
          .ok());
  ForwardArgs f;
  f.batch = 2;
  f.inputs = inputs;
  f.output = mem + 4;
  f.params = mem + 16;
  f.state = mem + 20;
  f.training = false;
  ASSERT_TRUE((*bn)->Forward(f).ok());
  BackwardArgs b;
  b.batch = 2;
  b.inputs = inputs;
  b.output = mem + 4;
  b.output_grad = mem + 12;
  b.input_grads = grads;
  b.params = mem + 16;
  b.param_grads = mem + 24;
  EXPECT_EQ((*bn)->Backward(b).code(), absl::StatusCode::kFailedPrecondition);
  f.training = true;
  ASSERT_TRUE((*bn)->Forward(f).ok());
  EXPECT_TRUE((*bn)->Backward(b).ok());
  b.batch = 1;  // Not the batch of the forward pass.
  EXPECT_EQ((*bn)->Backward(b).code(), absl::StatusCode::kFailedPrecondition);
}

INSTANTIATE_TEST_SUITE_P(Devices, BatchNormalizationTest,
                         ::testing::ValuesIn(nn_test::TestDevices()),
                         nn_test::DeviceName);

}  // namespace
}  // namespace lockstep
