// A reference for the tests of worker/model/mlp.h, sharing no code with
// Mlp: the flat parameter layout written out independently, and the MLP's
// mean softmax cross-entropy and its gradient in double.
#ifndef LOCKSTEP_TESTS_UNIT_MLP_TEST_UTIL_H_
#define LOCKSTEP_TESTS_UNIT_MLP_TEST_UTIL_H_

#include <algorithm>
#include <cmath>
#include <cstddef>
#include <cstdint>
#include <utility>
#include <vector>

namespace lockstep {
namespace mlp_test {

// The flat layout the test expects, written out independently of Mlp:
// per layer the [in, out] kernel, then the [out] bias.
struct Offsets {
  std::vector<size_t> kernel;
  std::vector<size_t> bias;
  size_t total = 0;
};

inline Offsets LayoutOf(const std::vector<int>& sizes) {
  Offsets o;
  for (size_t i = 0; i + 1 < sizes.size(); ++i) {
    o.kernel.push_back(o.total);
    o.total += static_cast<size_t>(sizes[i]) * sizes[i + 1];
    o.bias.push_back(o.total);
    o.total += sizes[i + 1];
  }
  return o;
}

// Every layer's activations in double, features first: ReLU after every
// layer but the last, whose logits are left as they are.
inline std::vector<std::vector<double>> ReferenceForward(
    const std::vector<int>& sizes, const Offsets& off,
    const std::vector<double>& w, const std::vector<float>& features,
    int rows) {
  const size_t layers = sizes.size() - 1;
  std::vector<std::vector<double>> act(sizes.size());
  act[0].assign(features.begin(), features.end());
  for (size_t l = 0; l < layers; ++l) {
    const int in = sizes[l], out = sizes[l + 1];
    act[l + 1].assign(static_cast<size_t>(rows) * out, 0.0);
    for (int r = 0; r < rows; ++r) {
      for (int j = 0; j < out; ++j) {
        double z = w[off.bias[l] + j];
        for (int i = 0; i < in; ++i) {
          z += act[l][r * in + i] * w[off.kernel[l] + i * out + j];
        }
        if (l + 1 < layers) z = std::max(z, 0.0);
        act[l + 1][r * out + j] = z;
      }
    }
  }
  return act;
}

// The summed softmax cross-entropy of rows x classes logits; *delta gets
// its gradient with respect to the logits, divided by rows.
inline double ReferenceSoftmax(const std::vector<double>& logits, int rows,
                               int classes, const std::vector<int32_t>& labels,
                               std::vector<double>* delta) {
  double loss = 0.0;
  delta->assign(static_cast<size_t>(rows) * classes, 0.0);
  for (int r = 0; r < rows; ++r) {
    const double* z = &logits[r * classes];
    double sum = 0.0;
    for (int c = 0; c < classes; ++c) sum += std::exp(z[c]);
    loss += std::log(sum) - z[labels[r]];
    for (int c = 0; c < classes; ++c) {
      (*delta)[r * classes + c] =
          (std::exp(z[c]) / sum - (c == labels[r] ? 1.0 : 0.0)) / rows;
    }
  }
  return loss;
}

// The textbook backward pass from the logits' gradient `delta`.
inline void ReferenceBackward(const std::vector<int>& sizes, const Offsets& off,
                              const std::vector<double>& w,
                              const std::vector<std::vector<double>>& act,
                              int rows, std::vector<double> delta,
                              std::vector<double>* grad) {
  grad->assign(off.total, 0.0);
  for (size_t l = sizes.size() - 1; l-- > 0;) {
    const int in = sizes[l], out = sizes[l + 1];
    for (int r = 0; r < rows; ++r) {
      for (int j = 0; j < out; ++j) {
        const double d = delta[r * out + j];
        (*grad)[off.bias[l] + j] += d;
        for (int i = 0; i < in; ++i) {
          (*grad)[off.kernel[l] + i * out + j] += act[l][r * in + i] * d;
        }
      }
    }
    if (l == 0) break;
    std::vector<double> below(static_cast<size_t>(rows) * in, 0.0);
    for (int r = 0; r < rows; ++r) {
      for (int i = 0; i < in; ++i) {
        if (act[l][r * in + i] <= 0.0) continue;
        double s = 0.0;
        for (int j = 0; j < out; ++j) {
          s += delta[r * out + j] * w[off.kernel[l] + i * out + j];
        }
        below[r * in + i] = s;
      }
    }
    delta = std::move(below);
  }
}

// Mean softmax cross-entropy of the MLP in double, and (when `grad` is not
// null) its gradient by the textbook backward pass. Shares no code with Mlp.
inline double ReferenceLoss(const std::vector<int>& sizes,
                            const std::vector<double>& w,
                            const std::vector<float>& features,
                            const std::vector<int32_t>& labels,
                            std::vector<double>* grad) {
  const Offsets off = LayoutOf(sizes);
  const int rows = static_cast<int>(labels.size());
  const std::vector<std::vector<double>> act =
      ReferenceForward(sizes, off, w, features, rows);
  std::vector<double> delta;
  const double loss =
      ReferenceSoftmax(act.back(), rows, sizes.back(), labels, &delta);
  if (grad != nullptr) {
    ReferenceBackward(sizes, off, w, act, rows, std::move(delta), grad);
  }
  return loss / rows;
}

}  // namespace mlp_test
}  // namespace lockstep

#endif  // LOCKSTEP_TESTS_UNIT_MLP_TEST_UTIL_H_
