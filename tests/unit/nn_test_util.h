// Test helpers for the layers of worker/model/nn: a fixture that runs each test
// on every device of the build, running one layer on a device, double-precision
// reference layers written straight from their definitions (sharing no code
// with worker/model/nn), and central finite differences of a reference in
// double.
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
#include "common/random.h"
#include "gtest/gtest.h"
#include "tests/unit/gpu_required.h"
#include "worker/device/device.h"
#include "worker/device/device_factory.h"
#include "worker/model/nn/layer.h"

namespace lockstep {
namespace nn_test {

using Vec = std::vector<double>;

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

inline std::vector<float> RandomFloats(size_t n, uint64_t seed,
                                       float lo = -1.0f, float hi = 1.0f) {
  Random random(seed);
  std::vector<float> v(n);
  for (float& x : v) x = random.Uniform(lo, hi);
  return v;
}

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
  auto upload = [&](const std::vector<float>& host,
                    size_t floats) -> std::unique_ptr<DeviceBuffer> {
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
  };
  auto download = [&](const DeviceBuffer& buffer, size_t floats) {
    std::vector<float> host(floats);
    EXPECT_TRUE(
        device.CopyToHost(buffer.data(), host.data(), floats * sizeof(float))
            .ok());
    return host;
  };
  if (prepare) {
    const absl::Status s = layer.Prepare(&device, batch);
    if (!s.ok()) {
      ADD_FAILURE() << s;
      return result;
    }
  }
  std::vector<std::unique_ptr<DeviceBuffer>> in_buffers, grad_buffers;
  std::vector<const float*> in_ptrs;
  std::vector<float*> grad_ptrs;
  for (size_t i = 0; i < inputs.size(); ++i) {
    in_buffers.push_back(upload(inputs[i], inputs[i].size()));
    in_ptrs.push_back(in_buffers.back()->As<float>());
    grad_buffers.push_back(upload({}, inputs[i].size()));
    grad_ptrs.push_back(grad_buffers.back()->As<float>());
  }
  const size_t out_size =
      static_cast<size_t>(batch) * layer.output_shape().size();
  auto out = upload({}, out_size);
  auto p = upload(params, params.size());
  auto pg = upload({}, params.size());
  auto st = upload(state, state.size());
  auto ws = upload({}, layer.WorkspaceFloats(batch));
  ForwardArgs f;
  f.batch = batch;
  f.inputs = in_ptrs;
  f.output = out->As<float>();
  f.params = p->As<float>();
  f.state = st->As<float>();
  f.workspace = ws->As<float>();
  f.training = training;
  const absl::Status fs = layer.Forward(f);
  EXPECT_TRUE(fs.ok()) << fs;
  result.output = download(*out, out_size);
  result.state = download(*st, state.size());
  if (output_grad.empty()) return result;
  auto og = upload(output_grad, out_size);
  BackwardArgs b;
  b.batch = batch;
  b.inputs = in_ptrs;
  b.output = out->As<float>();
  b.output_grad = og->As<float>();
  b.input_grads = grad_ptrs;
  b.params = p->As<float>();
  b.param_grads = pg->As<float>();
  b.workspace = ws->As<float>();
  const absl::Status bs = layer.Backward(b);
  EXPECT_TRUE(bs.ok()) << bs;
  for (size_t i = 0; i < inputs.size(); ++i) {
    result.input_grads.push_back(download(*grad_buffers[i], inputs[i].size()));
  }
  result.param_grads = download(*pg, params.size());
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

// ---- Reference layers in double, NHWC, straight from the definitions ----

struct RefWindow {
  int batch, height, width, channels;
  int kh, kw, sh, sw;
  int pad_top, pad_left;
  int out_h, out_w;
};

// kernel [kh][kw][channels][filters], bias [filters] (empty: none).
inline Vec RefConv2D(const Vec& x, const RefWindow& g, const Vec& kernel,
                     const Vec& bias, int filters) {
  Vec y(static_cast<size_t>(g.batch) * g.out_h * g.out_w * filters, 0.0);
  for (int n = 0; n < g.batch; ++n)
    for (int oh = 0; oh < g.out_h; ++oh)
      for (int ow = 0; ow < g.out_w; ++ow)
        for (int f = 0; f < filters; ++f) {
          double sum = bias.empty() ? 0.0 : bias[f];
          for (int i = 0; i < g.kh; ++i)
            for (int j = 0; j < g.kw; ++j) {
              const int h = oh * g.sh - g.pad_top + i;
              const int w = ow * g.sw - g.pad_left + j;
              if (h < 0 || h >= g.height || w < 0 || w >= g.width) continue;
              for (int c = 0; c < g.channels; ++c) {
                sum += x[((n * g.height + h) * g.width + w) * g.channels + c] *
                       kernel[((i * g.kw + j) * g.channels + c) * filters + f];
              }
            }
          y[((n * g.out_h + oh) * g.out_w + ow) * filters + f] = sum;
        }
  return y;
}

// Max over the window's pixels inside the image.
inline Vec RefMaxPool(const Vec& x, const RefWindow& g) {
  Vec y(static_cast<size_t>(g.batch) * g.out_h * g.out_w * g.channels);
  for (int n = 0; n < g.batch; ++n)
    for (int oh = 0; oh < g.out_h; ++oh)
      for (int ow = 0; ow < g.out_w; ++ow)
        for (int c = 0; c < g.channels; ++c) {
          double best = -std::numeric_limits<double>::infinity();
          for (int i = 0; i < g.kh; ++i)
            for (int j = 0; j < g.kw; ++j) {
              const int h = oh * g.sh - g.pad_top + i;
              const int w = ow * g.sw - g.pad_left + j;
              if (h < 0 || h >= g.height || w < 0 || w >= g.width) continue;
              best = std::max(
                  best, x[((n * g.height + h) * g.width + w) * g.channels + c]);
            }
          y[((n * g.out_h + oh) * g.out_w + ow) * g.channels + c] = best;
        }
  return y;
}

// x is rows x channels; normalizes with the batch's mean and biased
// variance. Writes them to *mean / *var when not null.
inline Vec RefBatchNormTraining(const Vec& x, int rows, int channels,
                                const Vec& gamma, const Vec& beta,
                                double epsilon, Vec* mean = nullptr,
                                Vec* var = nullptr) {
  Vec m(channels, 0.0), v(channels, 0.0);
  for (int r = 0; r < rows; ++r)
    for (int c = 0; c < channels; ++c) m[c] += x[r * channels + c] / rows;
  for (int r = 0; r < rows; ++r)
    for (int c = 0; c < channels; ++c) {
      const double d = x[r * channels + c] - m[c];
      v[c] += d * d / rows;
    }
  Vec y(x.size());
  for (int r = 0; r < rows; ++r)
    for (int c = 0; c < channels; ++c) {
      y[r * channels + c] =
          gamma[c] * (x[r * channels + c] - m[c]) / std::sqrt(v[c] + epsilon) +
          beta[c];
    }
  if (mean != nullptr) *mean = m;
  if (var != nullptr) *var = v;
  return y;
}

// x is rows x in, kernel in x units.
inline Vec RefDense(const Vec& x, int rows, int in, const Vec& kernel,
                    const Vec& bias, int units) {
  Vec y(static_cast<size_t>(rows) * units);
  for (int r = 0; r < rows; ++r)
    for (int u = 0; u < units; ++u) {
      double sum = bias.empty() ? 0.0 : bias[u];
      for (int i = 0; i < in; ++i) sum += x[r * in + i] * kernel[i * units + u];
      y[r * units + u] = sum;
    }
  return y;
}

inline Vec RefRelu(Vec x) {
  for (double& v : x) v = std::max(v, 0.0);
  return x;
}

// Mean softmax cross-entropy of rows x classes logits.
inline double RefMeanCrossEntropy(const Vec& logits, int rows, int classes,
                                  const std::vector<int32_t>& labels) {
  double loss = 0.0;
  for (int r = 0; r < rows; ++r) {
    const double* z = logits.data() + static_cast<size_t>(r) * classes;
    const double max = *std::max_element(z, z + classes);
    double sum = 0.0;
    for (int c = 0; c < classes; ++c) sum += std::exp(z[c] - max);
    loss += std::log(sum) + max - z[labels[r]];
  }
  return loss / rows;
}

// Max pooling over a batch of NHWC images with 'valid' windows of k x k and
// stride k.
inline Vec RefMaxPoolValid(const Vec& x, int batch, int height, int width,
                           int channels, int k) {
  RefWindow g{batch,
              height,
              width,
              channels,
              k,
              k,
              k,
              k,
              0,
              0,
              (height - k) / k + 1,
              (width - k) / k + 1};
  return RefMaxPool(x, g);
}

inline Vec Slice(const Vec& v, size_t begin, size_t count) {
  return Vec(v.begin() + begin, v.begin() + begin + count);
}

}  // namespace nn_test
}  // namespace lockstep

#endif  // LOCKSTEP_TESTS_UNIT_NN_TEST_UTIL_H_
