// Whether two models compute the same training: the same weights, state
// and batch give the same loss, gradients and moving statistics, a few SGD
// steps stay together and inference agrees. For one model on two devices
// (tests/gpu/cuda_models_test.cc: CUDA against the CPU) or two ways of
// computing on one (tests/unit/cpu_conv_models_test.cc: the CPU device's
// direct convolutions against im2col + OpenBLAS). Also the helpers those
// comparisons share: random non-zero data and closeness on a tensor's scale.
#ifndef LOCKSTEP_TESTS_UNIT_MODEL_AGREEMENT_H_
#define LOCKSTEP_TESTS_UNIT_MODEL_AGREEMENT_H_

#include <algorithm>
#include <cmath>
#include <cstdint>
#include <ostream>
#include <string>
#include <vector>

#include "absl/strings/str_cat.h"
#include "absl/types/span.h"
#include "common/base/random.h"
#include "gtest/gtest.h"
#include "worker/model/model.h"
#include "worker/model/nn/layer.h"

namespace lockstep {
namespace agreement {

inline constexpr double kTolerance = 1e-5;

inline std::vector<float> RandomFloats(size_t n, uint64_t seed,
                                       float lo = -1.0f, float hi = 1.0f) {
  Random random(seed);
  std::vector<float> v(n);
  for (float& x : v) {
    do {
      x = random.Uniform(lo, hi);
    } while (x == 0.0f);  // Non-zero, so every entry is seen to matter.
  }
  return v;
}

inline std::vector<int32_t> RandomLabels(size_t n, int classes, uint64_t seed) {
  Random random(seed);
  std::vector<int32_t> v(n);
  for (int32_t& y : v) y = static_cast<int32_t>(random.UniformInt(classes));
  return v;
}

// |got - want| <= tolerance * scale for every entry, where scale is
// max |want|, or min_scale if that is larger (for a tensor whose true
// values are zero, such as a bias that batch norm cancels, and whose
// entries are rounding residue on either device).
inline void ExpectClose(const std::vector<float>& got,
                        const std::vector<float>& want, const std::string& what,
                        double tolerance = kTolerance, double min_scale = 0.0) {
  ASSERT_EQ(got.size(), want.size()) << what;
  double scale = min_scale;
  for (float w : want) scale = std::max(scale, std::abs(double{w}));
  ASSERT_GT(scale, 0.0) << what << ": all zeros proves nothing";
  int reported = 0;
  for (size_t i = 0; i < got.size(); ++i) {
    if (std::abs(double{got[i]} - want[i]) > tolerance * scale &&
        ++reported <= 5) {
      ADD_FAILURE() << what << "[" << i << "]: got " << got[i] << ", want "
                    << want[i] << " (scale " << scale << ")";
    }
  }
}

// Splits a flat parameter vector into the model's tensors.
inline std::vector<std::vector<float>> ByTensor(
    const Model& model, const std::vector<float>& flat) {
  std::vector<std::vector<float>> pieces;
  auto it = flat.begin();
  for (const TensorInfo& t : model.Tensors()) {
    int64_t size = 1;
    for (int64_t d : t.shape) size *= d;
    pieces.emplace_back(it, it + size);
    it += size;
  }
  return pieces;
}

// How closely two computations of one model must agree. Forward results
// (the loss, the moving statistics, the inference loss) are smooth in the
// weights and must agree to float rounding. Gradients are not: ReLU's
// derivative jumps at zero, so a pre-activation that rounds to the other
// side of zero drops or keeps a whole path, and batch norm over few rows
// magnifies that. Moving every weight of ResNet-20 by one ulp moves its
// gradient by 0.3% (norm of the difference over the norm), ResNet-50's at
// batch 16 by 0.8-1.5%, on the same device. Gradients, and the weights
// after three SGD steps, are therefore compared tensor by tensor in norm,
// each on at least a thousandth of the whole gradient's norm (the biases
// that feed batch norm have a true gradient of zero, and each computation
// returns its own rounding residue there).
struct ModelCase {
  std::string model;
  TensorShape input;
  int batch;
  double forward_tolerance;   // Relative, entry by entry.
  double gradient_tolerance;  // Relative, in norm per tensor.
};

inline void PrintTo(const ModelCase& c, std::ostream* os) { *os << c.model; }

inline std::string ModelCaseName(
    const ::testing::TestParamInfo<ModelCase>& info) {
  return info.param.model;
}

// The convolutional models, small batches: a BN-free CNN (smooth enough for
// the forward tolerance throughout), ResNet-20 and ResNet-50.
inline std::vector<ModelCase> ConvModelCases() {
  return {{"cnn", {20, 20, 3}, 7, 1e-5, 1e-5},
          {"resnet20", {32, 32, 3}, 5, 1e-5, 2e-2},
          {"resnet50", {32, 32, 3}, 16, 1e-4, 5e-2}};
}

// ||got - want|| <= tolerance * max(||want||, floor), per tensor.
inline void ExpectCloseInNorm(const Model& model, const std::vector<float>& got,
                              const std::vector<float>& want,
                              const std::string& what, double tolerance) {
  ASSERT_EQ(got.size(), want.size()) << what;
  double whole = 0.0;
  for (float w : want) whole += double{w} * w;
  ASSERT_GT(whole, 0.0) << what << ": all zeros proves nothing";
  const double floor = 1e-3 * std::sqrt(whole);
  const std::vector<TensorInfo> tensors = model.Tensors();
  const auto got_t = ByTensor(model, got);
  const auto want_t = ByTensor(model, want);
  for (size_t t = 0; t < tensors.size(); ++t) {
    double diff = 0.0, norm = 0.0;
    for (size_t i = 0; i < want_t[t].size(); ++i) {
      const double d = double{got_t[t][i]} - want_t[t][i];
      diff += d * d;
      norm += double{want_t[t][i]} * want_t[t][i];
    }
    const double scale = std::max(std::sqrt(norm), floor);
    EXPECT_LE(std::sqrt(diff), tolerance * scale)
        << what << ", " << tensors[t].name << ": difference " << std::sqrt(diff)
        << ", norm " << std::sqrt(norm);
  }
}

// `got` against `want`, two models of c's spec built for batch c.batch
// (10 classes): from the same weights and (random) moving statistics, the
// loss and the moving statistics after one step within c.forward_tolerance,
// the gradient within c.gradient_tolerance in norm, and, for smooth models,
// the inference loss with the new moving statistics within
// c.forward_tolerance and, for smooth models, the weights after three SGD
// steps.
inline void ExpectModelsAgree(Model& want, Model& got, const ModelCase& c) {
  Model* models[2] = {&want, &got};
  const size_t features = static_cast<size_t>(c.input.size());
  const std::vector<float> x = RandomFloats(c.batch * features, 11);
  const std::vector<int32_t> y = RandomLabels(c.batch, 10, 12);
  const std::vector<float> w0 = want.InitialWeights(13);
  // Moving statistics away from their initial zeros and ones.
  std::vector<float> s0 = RandomFloats(want.StateSize(), 14, 0.1f, 1.0f);

  std::vector<float> grad[2], state[2];
  BatchStats stats[2];
  for (int d = 0; d < 2; ++d) {
    ASSERT_TRUE(models[d]->SetWeights(w0).ok());
    ASSERT_TRUE(models[d]->SetState(s0).ok());
    grad[d].assign(w0.size(), 0.0f);
    auto s = models[d]->ComputeGradients(x, y, absl::MakeSpan(grad[d]));
    ASSERT_TRUE(s.ok()) << s.status();
    stats[d] = *s;
    state[d].assign(s0.size(), 0.0f);
    ASSERT_TRUE(models[d]->State(absl::MakeSpan(state[d])).ok());
  }
  EXPECT_NEAR(stats[1].loss_sum, stats[0].loss_sum,
              c.forward_tolerance * stats[0].loss_sum);
  EXPECT_EQ(stats[1].examples, c.batch);
  ExpectCloseInNorm(want, grad[1], grad[0], "gradient", c.gradient_tolerance);
  if (!s0.empty()) {
    ExpectClose(state[1], state[0], "moving statistics", c.forward_tolerance);
  }

  // Inference from the same weights with those moving statistics.
  auto want_eval = want.Evaluate(x, y);
  auto got_eval = got.Evaluate(x, y);
  ASSERT_TRUE(want_eval.ok()) << want_eval.status();
  ASSERT_TRUE(got_eval.ok()) << got_eval.status();
  EXPECT_NEAR(got_eval->loss_sum, want_eval->loss_sum,
              c.forward_tolerance * want_eval->loss_sum);

  // Three SGD steps, each model on its own weights and state, where the
  // model is smooth enough for them to stay together: in the ResNets the
  // first step's differences (above) change which ReLUs pass in the next,
  // and the runs drift apart as two runs on one device do from weights one
  // ulp apart.
  if (c.gradient_tolerance > c.forward_tolerance) return;
  std::vector<float> w[2] = {w0, w0};
  for (int step = 0; step < 3; ++step) {
    for (int d = 0; d < 2; ++d) {
      std::vector<float> g(w[d].size());
      ASSERT_TRUE(models[d]->SetWeights(w[d]).ok());
      auto s = models[d]->ComputeGradients(x, y, absl::MakeSpan(g));
      ASSERT_TRUE(s.ok()) << s.status();
      for (size_t i = 0; i < g.size(); ++i) w[d][i] -= 0.05f * g[i];
    }
  }
  ExpectCloseInNorm(want, w[1], w[0], "weights after 3 steps",
                    c.gradient_tolerance);
}

}  // namespace agreement
}  // namespace lockstep

#endif  // LOCKSTEP_TESTS_UNIT_MODEL_AGREEMENT_H_
