// The models on the CUDA device against the CPU device: the MLP's
// gradients and steps, also from several devices on one GPU, and the
// convolutional models', where the same weights, state and batch give the
// same loss, gradient and moving statistics and a few training steps stay
// together. Skips itself where
// no GPU is visible; tests/gpu/device_check.sh runs it on a GPU machine.
// (Each layer is also checked against finite differences on both devices
// by the layer tests in tests/unit, which run on CUDA when it is built.)
#include <algorithm>
#include <cmath>
#include <cstdint>
#include <memory>
#include <ostream>
#include <string>
#include <thread>
#include <vector>

#include "absl/strings/str_cat.h"
#include "common/base/random.h"
#include "gtest/gtest.h"
#include "tests/gpu/cuda_test_util.h"
#include "worker/device/cpu/cpu_device.h"
#include "worker/device/cuda/cuda_device.h"
#include "worker/model/mlp.h"
#include "worker/model/models.h"

namespace lockstep {
namespace {

using cuda_test::ByTensor;
using cuda_test::CudaVsCpuTest;
using cuda_test::ExpectClose;
using cuda_test::kTolerance;
using cuda_test::RandomFloats;
using cuda_test::RandomLabels;

// Glorot kernels plus non-zero biases.
std::vector<float> RandomWeights(const Model& mlp, uint64_t seed) {
  std::vector<float> w = mlp.InitialWeights(seed);
  Random random(seed + 1);
  int64_t offset = 0;
  for (const TensorInfo& t : mlp.Tensors()) {
    int64_t size = 1;
    for (int64_t d : t.shape) size *= d;
    if (t.shape.size() == 1) {
      for (int64_t i = 0; i < size; ++i) {
        w[offset + i] = random.Uniform(-0.3f, 0.3f);
      }
    }
    offset += size;
  }
  return w;
}

// The first `rows` examples' gradients and batch statistics on the CPU
// (mlps[0]) and CUDA (mlps[1]) models, both from weights w0.
void ExpectGradientsAgree(GraphModel* const mlps[2], int features,
                          const std::vector<float>& x,
                          const std::vector<int32_t>& y,
                          const std::vector<float>& w0, int rows) {
  std::vector<float> grad[2];
  BatchStats stats[2];
  for (int d = 0; d < 2; ++d) {
    grad[d].assign(w0.size(), std::nanf(""));
    ASSERT_TRUE(mlps[d]->SetWeights(w0).ok());
    auto s = mlps[d]->ComputeGradients(
        absl::MakeConstSpan(x).subspan(0, static_cast<size_t>(rows) * features),
        absl::MakeConstSpan(y).subspan(0, rows), absl::MakeSpan(grad[d]));
    ASSERT_TRUE(s.ok()) << s.status();
    stats[d] = *s;
  }
  EXPECT_NEAR(stats[1].loss_sum, stats[0].loss_sum,
              kTolerance * stats[0].loss_sum);
  EXPECT_EQ(stats[1].correct, stats[0].correct);
  EXPECT_EQ(stats[1].examples, rows);
  const auto want = cuda_test::ByTensor(*mlps[0], grad[0]);
  const auto got = cuda_test::ByTensor(*mlps[0], grad[1]);
  const std::vector<TensorInfo> tensors = mlps[0]->Tensors();
  for (size_t t = 0; t < tensors.size(); ++t) {
    ExpectClose(got[t], want[t],
                absl::StrCat(tensors[t].name, " gradient, ", rows, " rows"));
  }
}

// A few SGD steps from w0, each device on its own weights: the same losses
// and weights on both.
void ExpectSgdStepsAgree(GraphModel* const mlps[2], const std::vector<float>& x,
                         const std::vector<int32_t>& y,
                         const std::vector<float>& w0) {
  std::vector<float> w[2] = {w0, w0};
  for (int step = 0; step < 5; ++step) {
    double loss[2];
    for (int d = 0; d < 2; ++d) {
      std::vector<float> grad(w[d].size());
      ASSERT_TRUE(mlps[d]->SetWeights(w[d]).ok());
      auto s = mlps[d]->ComputeGradients(x, y, absl::MakeSpan(grad));
      ASSERT_TRUE(s.ok()) << s.status();
      loss[d] = s->loss_sum;
      for (size_t i = 0; i < grad.size(); ++i) w[d][i] -= 0.2f * grad[i];
    }
    EXPECT_NEAR(loss[1], loss[0], kTolerance * loss[0]) << "step " << step;
  }
  const auto want = cuda_test::ByTensor(*mlps[0], w[0]);
  const auto got = cuda_test::ByTensor(*mlps[0], w[1]);
  for (size_t t = 0; t < want.size(); ++t) {
    ExpectClose(got[t], want[t], absl::StrCat("weights after 5 steps, ", t));
  }
}

TEST_F(CudaVsCpuTest, MlpGradientsAndTrainingSteps) {
  const std::vector<int> sizes = {37, 45, 29, 11};
  const int max_batch = 53;
  auto cpu_mlp = CreateMlp(sizes, max_batch, cpu_.get());
  auto cuda_mlp = CreateMlp(sizes, max_batch, cuda_.get());
  ASSERT_TRUE(cpu_mlp.ok()) << cpu_mlp.status();
  ASSERT_TRUE(cuda_mlp.ok()) << cuda_mlp.status();
  GraphModel* const mlps[2] = {cpu_mlp->get(), cuda_mlp->get()};
  const std::vector<float> x = RandomFloats(size_t{max_batch} * sizes[0], 41);
  const std::vector<int32_t> y = RandomLabels(max_batch, sizes.back(), 42);

  // A full batch, then a smaller one through the same buffers.
  const std::vector<float> w0 = RandomWeights(*mlps[0], 43);
  for (const int rows : {max_batch, 19}) {
    ASSERT_NO_FATAL_FAILURE(
        ExpectGradientsAgree(mlps, sizes[0], x, y, w0, rows));
  }
  ASSERT_NO_FATAL_FAILURE(ExpectSgdStepsAgree(mlps, x, y, w0));

  // Evaluate splits more rows than max_batch the same way on both.
  const std::vector<float> ex = RandomFloats(size_t{131} * sizes[0], 44);
  const std::vector<int32_t> ey = RandomLabels(131, sizes.back(), 45);
  auto cpu_eval = mlps[0]->Evaluate(ex, ey);
  auto cuda_eval = mlps[1]->Evaluate(ex, ey);
  ASSERT_TRUE(cpu_eval.ok() && cuda_eval.ok());
  EXPECT_NEAR(cuda_eval->loss_sum, cpu_eval->loss_sum,
              kTolerance * cpu_eval->loss_sum);
  EXPECT_EQ(cuda_eval->correct, cpu_eval->correct);
}

TEST_F(CudaVsCpuTest, DevicesOnOneGpuInSeveralThreadsAgree) {
  const std::vector<int> sizes = {33, 65, 10};
  const int rows = 47;
  const std::vector<float> x = RandomFloats(size_t{rows} * sizes[0], 51);
  const std::vector<int32_t> y = RandomLabels(rows, sizes.back(), 52);
  constexpr int kThreads = 3;
  std::vector<std::vector<float>> grads(kThreads);
  std::vector<absl::Status> statuses(kThreads);
  std::vector<std::thread> threads;
  for (int t = 0; t < kThreads; ++t) {
    threads.emplace_back([&, t] {
      statuses[t] = [&]() -> absl::Status {
        auto device = CreateCudaDevice(0, false);
        if (!device.ok()) return device.status();
        auto mlp = CreateMlp(sizes, rows, device->get());
        if (!mlp.ok()) return mlp.status();
        std::vector<float> w = (*mlp)->InitialWeights(7);
        grads[t].resize(w.size());
        for (int step = 0; step < 10; ++step) {
          if (absl::Status s = (*mlp)->SetWeights(w); !s.ok()) return s;
          auto stats = (*mlp)->ComputeGradients(x, y, absl::MakeSpan(grads[t]));
          if (!stats.ok()) return stats.status();
        }
        return absl::OkStatus();
      }();
    });
  }
  for (std::thread& thread : threads) thread.join();
  for (int t = 0; t < kThreads; ++t) {
    ASSERT_TRUE(statuses[t].ok()) << statuses[t];
    ExpectClose(grads[t], grads[0], absl::StrCat("thread ", t), 1e-6);
  }
}

using agreement::ModelCase;

class CudaModelsTest : public ::testing::TestWithParam<ModelCase> {
 protected:
  void SetUp() override {
    auto device = CreateCudaDevice(0, /*tf32=*/false);
    if (absl::IsFailedPrecondition(device.status())) {
      LOCKSTEP_SKIP_WITHOUT_GPU(device.status().ToString() +
                                cuda_test::kNeedsAGpu);
    }
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
  agreement::ExpectModelsAgree(*models_[0], *models_[1], GetParam());
}

INSTANTIATE_TEST_SUITE_P(Models, CudaModelsTest,
                         ::testing::ValuesIn(agreement::ConvModelCases()),
                         agreement::ModelCaseName);

}  // namespace
}  // namespace lockstep
