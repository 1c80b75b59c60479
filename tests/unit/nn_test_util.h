// Test helpers for the layers of worker/model/nn: a fixture that runs each test
// on every device of the build, running one layer on a device, and central
// finite differences in double of the reference layers of
// tests/unit/nn_reference_layers.h (included here).
#ifndef LOCKSTEP_TESTS_UNIT_NN_TEST_UTIL_H_
#define LOCKSTEP_TESTS_UNIT_NN_TEST_UTIL_H_

#include <algorithm>
#include <cmath>
#include <cstdint>
#include <functional>
#include <limits>
#include <memory>
#include <string>
#include <vector>

#include "absl/status/status.h"
#include "gtest/gtest.h"
#include "tests/unit/gpu_required.h"
#include "tests/unit/nn_reference_layers.h"
#include "tests/unit/random_floats.h"
#include "worker/device/device.h"
#include "worker/device/device_factory.h"
#include "worker/model/nn/layer.h"

namespace lockstep {
namespace nn_test {

// The devices the layer tests run on: "cpu" (as workers get it: the direct
// AVX-512 convolutions where they win), "cpu_direct" (those for every
// convolution; skipped without AVX-512F), "cpu_im2col" (im2col + OpenBLAS
// for every convolution), and "cuda" when this build has the CUDA device
// (tests/gpu/device_check.sh runs them on a GPU machine).
inline std::vector<std::string> TestDevices() {
  std::vector<std::string> kinds = {"cpu", "cpu_direct", "cpu_im2col"};
  if (CudaDeviceBuilt()) kinds.push_back("cuda");
  return kinds;
}

// Names the tests after their device (".../cuda"), for filters.
inline std::string DeviceName(
    const ::testing::TestParamInfo<std::string>& info) {
  return info.param;
}

// A fixture whose device_ is the device GetParam() names; the CUDA runs
// skip themselves where no GPU is visible. Instantiate with
//   INSTANTIATE_TEST_SUITE_P(Devices, SomeTest,
//                            ::testing::ValuesIn(nn_test::TestDevices()),
//                            nn_test::DeviceName);
class OnEachDevice : public ::testing::TestWithParam<std::string> {
 protected:
  void SetUp() override {
    DeviceOptions options;
    options.kind = GetParam();
    if (GetParam() == "cpu_direct" || GetParam() == "cpu_im2col") {
      options.kind = "cpu";
      options.cpu_conv = GetParam().substr(4);
    }
    auto device = CreateDevice(options);
    if (!device.ok() && GetParam() != "cpu" &&
        absl::IsFailedPrecondition(device.status())) {
      if (GetParam() == "cuda") LOCKSTEP_SKIP_WITHOUT_GPU(device.status());
      GTEST_SKIP() << device.status();
    }
    ASSERT_TRUE(device.ok()) << device.status();
    device_ = std::move(*device);
  }

  std::unique_ptr<Device> device_;
};

using ::lockstep::RandomFloats;  // tests/unit/random_floats.h

// Uniform in [-1, 1) but at least `gap` from zero, so ReLU's kink and max
// pooling's ties stay further than a finite-difference step away.
inline std::vector<float> RandomAwayFromZero(size_t n, uint64_t seed,
                                             float gap = 0.05f) {
  std::vector<float> v = RandomFloats(n, seed);
  for (float& x : v) x = x < 0 ? x - gap : x + gap;
  return v;
}

inline Vec ToDouble(const std::vector<float>& v) {
  return Vec(v.begin(), v.end());
}

// What a layer computed on the device, copied back to the host.
struct LayerResult {
  std::vector<float> output;
  std::vector<std::vector<float>> input_grads;
  std::vector<float> param_grads;
  std::vector<float> state;  // After the forward pass.
};

// A copy of `host` in device memory of at least `floats` floats (at least
// one); null, with an ADD_FAILURE, when the allocation fails.
inline std::unique_ptr<DeviceBuffer> Upload(Device& device,
                                            const std::vector<float>& host,
                                            size_t floats) {
  auto buffer = device.Allocate(std::max<size_t>(floats, 1) * sizeof(float));
  if (!buffer.ok()) {
    ADD_FAILURE() << buffer.status();
    return nullptr;
  }
  if (!host.empty()) {
    EXPECT_TRUE(device
                    .CopyToDevice(host.data(), (*buffer)->data(),
                                  host.size() * sizeof(float))
                    .ok());
  }
  return std::move(*buffer);
}

// The first `floats` floats of `buffer`, copied to the host.
inline std::vector<float> Download(Device& device, const DeviceBuffer& buffer,
                                   size_t floats) {
  std::vector<float> host(floats);
  EXPECT_TRUE(
      device.CopyToHost(buffer.data(), host.data(), floats * sizeof(float))
          .ok());
  return host;
}

// A layer's buffers in device memory for one run of RunLayer.
struct LayerBuffers {
  std::vector<std::unique_ptr<DeviceBuffer>> in, grad;
  std::vector<const float*> in_ptrs;
  std::vector<float*> grad_ptrs;
  std::unique_ptr<DeviceBuffer> out, params, param_grads, state, workspace;
  size_t out_size = 0;
};

// Uploads the inputs, parameters and state; allocates the rest.
inline LayerBuffers UploadLayer(Device& device, const Layer& layer, int batch,
                                const std::vector<std::vector<float>>& inputs,
                                const std::vector<float>& params,
                                const std::vector<float>& state) {
  LayerBuffers buffers;
  for (size_t i = 0; i < inputs.size(); ++i) {
    buffers.in.push_back(Upload(device, inputs[i], inputs[i].size()));
    buffers.in_ptrs.push_back(buffers.in.back()->As<float>());
    buffers.grad.push_back(Upload(device, {}, inputs[i].size()));
    buffers.grad_ptrs.push_back(buffers.grad.back()->As<float>());
  }
  buffers.out_size = static_cast<size_t>(batch) * layer.output_shape().size();
  buffers.out = Upload(device, {}, buffers.out_size);
  buffers.params = Upload(device, params, params.size());
  buffers.param_grads = Upload(device, {}, params.size());
  buffers.state = Upload(device, state, state.size());
  buffers.workspace = Upload(device, {}, layer.WorkspaceFloats(batch));
  return buffers;
}

// Runs Backward on `buffers` with `output_grad` and copies the gradients
// into `*result`.
inline void RunBackward(Device& device, Layer& layer, int batch,
                        const LayerBuffers& buffers,
                        const std::vector<std::vector<float>>& inputs,
                        size_t param_count,
                        const std::vector<float>& output_grad,
                        LayerResult* result) {
  auto og = Upload(device, output_grad, buffers.out_size);
  BackwardArgs b;
  b.batch = batch;
  b.inputs = buffers.in_ptrs;
  b.output = buffers.out->As<float>();
  b.output_grad = og->As<float>();
  b.input_grads = buffers.grad_ptrs;
  b.params = buffers.params->As<float>();
  b.param_grads = buffers.param_grads->As<float>();
  b.workspace = buffers.workspace->As<float>();
  const absl::Status bs = layer.Backward(b);
  EXPECT_TRUE(bs.ok()) << bs;
  for (size_t i = 0; i < inputs.size(); ++i) {
    result->input_grads.push_back(
        Download(device, *buffers.grad[i], inputs[i].size()));
  }
  result->param_grads = Download(device, *buffers.param_grads, param_count);
}

// Prepares `layer` on `device` (for `batch`) unless it is already, runs
// Forward and, when `output_grad` is not empty, Backward; every buffer goes
// through device memory. Failures are reported with ADD_FAILURE.
inline LayerResult RunLayer(Device& device, Layer& layer, int batch,
                            const std::vector<std::vector<float>>& inputs,
                            const std::vector<float>& params,
                            const std::vector<float>& state,
                            const std::vector<float>& output_grad,
                            bool training, bool prepare = true) {
  LayerResult result;
  if (prepare) {
    const absl::Status s = layer.Prepare(&device, batch);
    if (!s.ok()) {
      ADD_FAILURE() << s;
      return result;
    }
  }
  const LayerBuffers buffers =
      UploadLayer(device, layer, batch, inputs, params, state);
  ForwardArgs f;
  f.batch = batch;
  f.inputs = buffers.in_ptrs;
  f.output = buffers.out->As<float>();
  f.params = buffers.params->As<float>();
  f.state = buffers.state->As<float>();
  f.workspace = buffers.workspace->As<float>();
  f.training = training;
  const absl::Status fs = layer.Forward(f);
  EXPECT_TRUE(fs.ok()) << fs;
  result.output = Download(device, *buffers.out, buffers.out_size);
  result.state = Download(device, *buffers.state, state.size());
  if (output_grad.empty()) return result;
  RunBackward(device, layer, batch, buffers, inputs, params.size(), output_grad,
              &result);
  return result;
}

// A layer's forward pass in double: (inputs, params) -> output.
using Reference = std::function<Vec(const std::vector<Vec>&, const Vec&)>;

// Gradients of sum(weights * f(inputs, params)) by central differences in
// double, for every input element and every parameter.
struct Numeric {
  std::vector<Vec> inputs;
  Vec params;
};

inline Numeric FiniteDifferences(const Reference& f, std::vector<Vec> inputs,
                                 Vec params, const Vec& weights,
                                 double h = 1e-6) {
  auto loss = [&]() {
    const Vec y = f(inputs, params);
    double sum = 0.0;
    for (size_t i = 0; i < y.size(); ++i) sum += weights[i] * y[i];
    return sum;
  };
  auto derivative = [&](double& x) {
    const double saved = x;
    x = saved + h;
    const double plus = loss();
    x = saved - h;
    const double minus = loss();
    x = saved;
    return (plus - minus) / (2 * h);
  };
  Numeric n;
  for (Vec& input : inputs) {
    Vec d(input.size());
    for (size_t i = 0; i < input.size(); ++i) d[i] = derivative(input[i]);
    n.inputs.push_back(std::move(d));
  }
  n.params.resize(params.size());
  for (size_t i = 0; i < params.size(); ++i) {
    n.params[i] = derivative(params[i]);
  }
  return n;
}

// Every got[i] within rel * max(|want|) (at least rel * 1e-3) of want[i].
inline void ExpectNear(const std::vector<float>& got, const Vec& want,
                       double rel, const std::string& what) {
  ASSERT_EQ(got.size(), want.size()) << what;
  double scale = 1e-3;
  for (double w : want) scale = std::max(scale, std::abs(w));
  int failures = 0;
  for (size_t i = 0; i < got.size() && failures < 10; ++i) {
    if (!(std::abs(got[i] - want[i]) <= rel * scale)) {
      ADD_FAILURE() << what << "[" << i << "]: got " << got[i] << ", want "
                    << want[i] << " (tolerance " << rel * scale << ")";
      ++failures;
    }
  }
}

// Runs `layer` forward and backward on the device and checks the output
// against `reference` and every gradient against finite differences of it.
inline void CheckLayer(Device& device, Layer& layer, int batch,
                       const std::vector<std::vector<float>>& inputs,
                       const std::vector<float>& params,
                       const std::vector<float>& state,
                       const Reference& reference, bool training,
                       double forward_tol = 1e-5, double grad_tol = 1e-4) {
  std::vector<Vec> in_d;
  for (const auto& in : inputs) in_d.push_back(ToDouble(in));
  const Vec want = reference(in_d, ToDouble(params));
  const std::vector<float> weights =
      RandomFloats(want.size(), 0x5eed + want.size());
  const LayerResult got =
      RunLayer(device, layer, batch, inputs, params, state, weights, training);
  ExpectNear(got.output, want, forward_tol, layer.name() + " output");
  const Numeric numeric =
      FiniteDifferences(reference, in_d, ToDouble(params), ToDouble(weights));
  for (size_t i = 0; i < inputs.size(); ++i) {
    ExpectNear(got.input_grads[i], numeric.inputs[i], grad_tol,
               layer.name() + " input " + std::to_string(i) + " gradient");
  }
  ExpectNear(got.param_grads, numeric.params, grad_tol,
             layer.name() + " parameter gradient");
}

}  // namespace nn_test
}  // namespace lockstep

#endif  // LOCKSTEP_TESTS_UNIT_NN_TEST_UTIL_H_
