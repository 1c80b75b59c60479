#include "tests/gpu/large_mlp.h"

#include <algorithm>
#include <cstddef>
#include <cstdint>
#include <memory>
#include <utility>
#include <vector>

#include "common/base/status_macros.h"
#include "tests/gpu/local_steps.h"
#include "worker/model/mlp.h"

namespace lockstep {
namespace bench {
namespace {

// The device math of one forward + backward, the calls Mlp makes, on
// buffers already on the device: no uploads, no gradient download.
absl::Status DeviceMathStep(Device& d, const std::vector<int>& sizes, int n,
                            const std::vector<DeviceBuffer*>& weights,
                            const std::vector<DeviceBuffer*>& acts,
                            DeviceBuffer& bias, DeviceBuffer& labels,
                            DeviceBuffer& delta_a, DeviceBuffer& delta_b,
                            DeviceBuffer& grad) {
  const size_t layers = sizes.size() - 1;
  for (size_t i = 0; i < layers; ++i) {
    float* out = acts[i + 1]->As<float>();
    RETURN_IF_ERROR(d.Gemm(false, false, n, sizes[i + 1], sizes[i], 1.0f,
                           acts[i]->As<float>(), weights[i]->As<float>(), 0.0f,
                           out));
    RETURN_IF_ERROR(d.AddBias(n, sizes[i + 1], bias.As<float>(), out));
    if (i + 1 < layers) {
      RETURN_IF_ERROR(d.ReluForward(size_t{1} * n * sizes[i + 1], out));
    }
  }
  double loss = 0;
  int64_t correct = 0;
  float* delta = delta_a.As<float>();
  float* next = delta_b.As<float>();
  RETURN_IF_ERROR(d.SoftmaxCrossEntropy(
      n, sizes.back(), acts.back()->As<float>(), labels.As<int32_t>(), 1.0f / n,
      delta, &loss, &correct));
  for (size_t i = layers; i-- > 0;) {
    // One scratch gradient buffer serves every layer: the math is the same.
    RETURN_IF_ERROR(d.Gemm(true, false, sizes[i], sizes[i + 1], n, 1.0f,
                           acts[i]->As<float>(), delta, 0.0f,
                           grad.As<float>()));
    RETURN_IF_ERROR(d.BiasGradient(n, sizes[i + 1], delta, grad.As<float>()));
    if (i == 0) break;
    RETURN_IF_ERROR(d.Gemm(false, true, n, sizes[i], sizes[i + 1], 1.0f, delta,
                           weights[i]->As<float>(), 0.0f, next));
    RETURN_IF_ERROR(
        d.ReluBackward(size_t{1} * n * sizes[i], acts[i]->As<float>(), next));
    std::swap(delta, next);
  }
  return d.Synchronize();
}

}  // namespace

double MlpFlops(const std::vector<int>& sizes, int batch) {
  double flops = 0;
  for (size_t i = 0; i + 1 < sizes.size(); ++i) {
    const double product = 2.0 * batch * sizes[i] * sizes[i + 1];
    flops += (i == 0 ? 2 : 3) * product;
  }
  return flops;
}

absl::StatusOr<LargeFigures> LargeMlp(Device& device, int batch, int steps) {
  const std::vector<int> sizes = {8192, 8192, 8192, 10};
  const double flops = MlpFlops(sizes, batch);
  LargeFigures figures;
  const std::vector<float> features =
      RandomFloats(size_t{1} * batch * sizes[0], 3);
  const std::vector<int32_t> labels = RandomLabels(batch, sizes.back(), 4);
  {
    // Math only: weights and activations stay on the device.
    std::vector<std::unique_ptr<DeviceBuffer>> owned;
    std::vector<DeviceBuffer*> weights, acts;
    size_t widest = 0;
    for (size_t i = 0; i < sizes.size(); ++i) {
      ASSIGN_OR_RETURN(auto act, device.Allocate(size_t{4} * batch * sizes[i]));
      acts.push_back(act.get());
      owned.push_back(std::move(act));
      if (i + 1 == sizes.size()) break;
      widest = std::max<size_t>(widest, sizes[i + 1]);
      const std::vector<float> w =
          RandomFloats(size_t{1} * sizes[i] * sizes[i + 1], 10 + i);
      ASSIGN_OR_RETURN(auto buffer, device.Allocate(w.size() * sizeof(float)));
      RETURN_IF_ERROR(
          device.CopyToDevice(w.data(), buffer->data(), w.size() * 4));
      weights.push_back(buffer.get());
      owned.push_back(std::move(buffer));
    }
    RETURN_IF_ERROR(device.CopyToDevice(features.data(), acts[0]->data(),
                                        features.size() * 4));
    ASSIGN_OR_RETURN(auto label_buffer, device.Allocate(labels.size() * 4));
    RETURN_IF_ERROR(device.CopyToDevice(labels.data(), label_buffer->data(),
                                        labels.size() * 4));
    ASSIGN_OR_RETURN(auto bias, device.Allocate(size_t{4} * widest));
    ASSIGN_OR_RETURN(auto delta_a, device.Allocate(size_t{4} * batch * widest));
    ASSIGN_OR_RETURN(auto delta_b, device.Allocate(size_t{4} * batch * widest));
    ASSIGN_OR_RETURN(auto grad, device.Allocate(size_t{4} * 8192 * 8192));
    auto step = [&] {
      return DeviceMathStep(device, sizes, batch, weights, acts, *bias,
                            *label_buffer, *delta_a, *delta_b, *grad);
    };
    RETURN_IF_ERROR(step());  // Warm-up.
    const Clock::time_point t0 = Clock::now();
    for (int i = 0; i < steps; ++i) RETURN_IF_ERROR(step());
    figures.math_tflops = flops * steps / SecondsSince(t0) / 1e12;
  }
  // The model as a worker runs it.
  ASSIGN_OR_RETURN(auto mlp, CreateMlp(sizes, batch, &device));
  std::vector<float> gradient(mlp->NumParameters());
  RETURN_IF_ERROR(mlp->SetWeights(mlp->InitialWeights(5)));
  auto step = [&]() -> absl::Status {
    return mlp->ComputeGradients(features, labels, absl::MakeSpan(gradient))
        .status();
  };
  RETURN_IF_ERROR(step());  // Warm-up.
  const Clock::time_point t0 = Clock::now();
  for (int i = 0; i < steps; ++i) RETURN_IF_ERROR(step());
  figures.step_tflops = flops * steps / SecondsSince(t0) / 1e12;
  return figures;
}

absl::StatusOr<double> SgemmRate(Device& device, int n, int reps) {
  const std::vector<float> host = RandomFloats(size_t{1} * n * n, 6);
  const size_t bytes = host.size() * sizeof(float);
  ASSIGN_OR_RETURN(auto a, device.Allocate(bytes));
  ASSIGN_OR_RETURN(auto b, device.Allocate(bytes));
  ASSIGN_OR_RETURN(auto c, device.Allocate(bytes));
  RETURN_IF_ERROR(device.CopyToDevice(host.data(), a->data(), bytes));
  RETURN_IF_ERROR(device.CopyToDevice(host.data(), b->data(), bytes));
  auto gemm = [&] {
    return device.Gemm(false, false, n, n, n, 1.0f, a->As<float>(),
                       b->As<float>(), 0.0f, c->As<float>());
  };
  for (int i = 0; i < 2; ++i) RETURN_IF_ERROR(gemm());
  RETURN_IF_ERROR(device.Synchronize());
  const Clock::time_point t0 = Clock::now();
  for (int i = 0; i < reps; ++i) RETURN_IF_ERROR(gemm());
  RETURN_IF_ERROR(device.Synchronize());
  return 2.0 * n * n * n * reps / SecondsSince(t0) / 1e12;
}

}  // namespace bench
}  // namespace lockstep
