// The convolutional models on the CUDA device against the CPU device: the
// same weights, state and batch give the same loss, gradient and moving
// statistics, and a few training steps stay together. Skips itself where
// no GPU is visible; tests/gpu/device_check.sh runs it on a GPU machine.
// (Each layer is also checked against finite differences on both devices
// by the layer tests in tests/unit, which run on CUDA when it is built.)
#include <algorithm>
#include <cmath>
#include <cstdint>
#include <memory>
#include <ostream>
#include <string>
#include <vector>

#include "absl/strings/str_cat.h"
#include "gtest/gtest.h"
#include "tests/gpu/cuda_test_util.h"
#include "worker/cpu_device.h"
#include "worker/cuda/cuda_device.h"
#include "worker/models.h"

namespace lockstep {
namespace {

using cuda_test::ByTensor;
using cuda_test::ExpectClose;
using cuda_test::RandomFloats;
using cuda_test::RandomLabels;

struct Case {
  std::string model;
  TensorShape input;
  int batch;
  double tolerance;  // Relative to each tensor's largest magnitude.
};

void PrintTo(const Case& c, std::ostream* os) { *os << c.model; }

std::string Name(const ::testing::TestParamInfo<Case>& info) {
  return info.param.model;
}

class CudaModelsTest : public ::testing::TestWithParam<Case> {
 protected:
  void SetUp() override {
    if (CudaDeviceCount() == 0) GTEST_SKIP() << cuda_test::kNoGpu;
    auto device = CreateCudaDevice(0, /*tf32=*/false);
    ASSERT_TRUE(device.ok()) << device.status();
    cuda_ = std::move(*device);
    ModelSpec spec;
    spec.name = GetParam().model;
    spec.input = GetParam().input;
    auto cpu_model = CreateModel(spec, GetParam().batch, cpu_.get());
    auto cuda_model = CreateModel(spec, GetParam().batch, cuda_.get());
    ASSERT_TRUE(cpu_model.ok()) << cpu_model.status();
    ASSERT_TRUE(cuda_model.ok()) << cuda_model.status();
    models_[0] = std::move(*cpu_model);
    models_[1] = std::move(*cuda_model);
  }

  std::unique_ptr<Device> cpu_ = CpuDevice::Create(1);
  std::unique_ptr<Device> cuda_;
  std::unique_ptr<Model> models_[2];  // CPU, CUDA.
};

TEST_P(CudaModelsTest, GradientsStateAndStepsMatchTheCpuDevice) {
  const Case& c = GetParam();
  const size_t features = static_cast<size_t>(c.input.size());
  const std::vector<float> x = RandomFloats(c.batch * features, 11);
  const std::vector<int32_t> y = RandomLabels(c.batch, 10, 12);
  const std::vector<float> w0 = models_[0]->InitialWeights(13);
  // Moving statistics away from their initial zeros and ones.
  std::vector<float> s0 = RandomFloats(models_[0]->StateSize(), 14, 0.1f, 1.0f);

  std::vector<float> grad[2], state[2];
  BatchStats stats[2];
  for (int d = 0; d < 2; ++d) {
    ASSERT_TRUE(models_[d]->SetWeights(w0).ok());
    ASSERT_TRUE(models_[d]->SetState(s0).ok());
    grad[d].assign(w0.size(), 0.0f);
    auto s = models_[d]->ComputeGradients(x, y, absl::MakeSpan(grad[d]));
    ASSERT_TRUE(s.ok()) << s.status();
    stats[d] = *s;
    state[d].assign(s0.size(), 0.0f);
    ASSERT_TRUE(models_[d]->State(absl::MakeSpan(state[d])).ok());
  }
  EXPECT_NEAR(stats[1].loss_sum, stats[0].loss_sum,
              c.tolerance * stats[0].loss_sum);
  EXPECT_EQ(stats[1].examples, c.batch);
  const auto want = ByTensor(*models_[0], grad[0]);
  const auto got = ByTensor(*models_[0], grad[1]);
  const std::vector<TensorInfo> tensors = models_[0]->Tensors();
  // The biases of convolutions that feed batch norm have a true gradient
  // of zero (batch norm cancels any shift), so each device returns rounding
  // residue there: compare every tensor on at least a thousandth of the
  // largest gradient.
  double largest = 0.0;
  for (float g : grad[0]) largest = std::max(largest, std::abs(double{g}));
  for (size_t t = 0; t < tensors.size(); ++t) {
    ExpectClose(got[t], want[t], absl::StrCat(tensors[t].name, " gradient"),
                c.tolerance, 1e-3 * largest);
  }
  if (!s0.empty()) {
    ExpectClose(state[1], state[0], "moving statistics", c.tolerance);
  }

  // Three SGD steps, each device on its own weights and state.
  std::vector<float> w[2] = {w0, w0};
  for (int step = 0; step < 3; ++step) {
    for (int d = 0; d < 2; ++d) {
      std::vector<float> g(w[d].size());
      ASSERT_TRUE(models_[d]->SetWeights(w[d]).ok());
      auto s = models_[d]->ComputeGradients(x, y, absl::MakeSpan(g));
      ASSERT_TRUE(s.ok()) << s.status();
      for (size_t i = 0; i < g.size(); ++i) w[d][i] -= 0.05f * g[i];
    }
  }
  ExpectClose(w[1], w[0], "weights after 3 steps", c.tolerance);

  // Inference with the moving statistics.
  auto cpu_eval = models_[0]->Evaluate(x, y);
  auto cuda_eval = models_[1]->Evaluate(x, y);
  ASSERT_TRUE(cpu_eval.ok()) << cpu_eval.status();
  ASSERT_TRUE(cuda_eval.ok()) << cuda_eval.status();
  EXPECT_NEAR(cuda_eval->loss_sum, cpu_eval->loss_sum,
              c.tolerance * cpu_eval->loss_sum);
}

// Batch norm over few rows amplifies rounding, hence ResNet-50's looser
// tolerance: its last stage normalizes 1x1 maps, one row per example.
INSTANTIATE_TEST_SUITE_P(
    Models, CudaModelsTest,
    ::testing::Values(Case{"cnn", {20, 20, 3}, 7, 1e-4},
                      Case{"resnet20", {32, 32, 3}, 5, 1e-4},
                      Case{"resnet50", {32, 32, 3}, 4, 1e-3}),
    Name);

}  // namespace
}  // namespace lockstep
