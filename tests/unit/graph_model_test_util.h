// The network the GraphModel tests train: a tiny residual graph on
// worker/model/nn's GraphBuilder, the same network's loss in double over the
// reference layers of tests/unit/nn_test_util.h, and the layer
// options the tests' graphs are built from.
#ifndef LOCKSTEP_TESTS_UNIT_GRAPH_MODEL_TEST_UTIL_H_
#define LOCKSTEP_TESTS_UNIT_GRAPH_MODEL_TEST_UTIL_H_

#include <cstddef>
#include <cstdint>
#include <utility>
#include <vector>

#include "absl/status/statusor.h"
#include "tests/unit/nn_test_util.h"
#include "worker/model/nn/graph_builder.h"

namespace lockstep {
namespace graph_test {

using nn_test::RefWindow;
using nn_test::Slice;
using nn_test::Vec;

inline Conv2DOptions Conv(int filters, int k, Padding padding) {
  Conv2DOptions o;
  o.filters = filters;
  o.kernel_height = o.kernel_width = k;
  o.padding = padding;
  return o;
}

inline DenseOptions Units(int units) {
  DenseOptions o;
  o.units = units;
  return o;
}

// input 5x4x2 -> conv_a (3x3 same, 3) -> relu_a -+-> conv_c (3x3 same, 3)
//                                                 |        |
//                                                 +-> add (relu_a + conv_c)
// -> double (add + add) -> bn -> gap -> dense (4 classes).
// relu_a feeds two layers and `double` reads one tensor twice, so the
// gradient sums of both kinds are exercised, and batch norm trains.
constexpr int kH = 5, kW = 4, kC = 2, kF = 3, kClasses = 4;

inline absl::StatusOr<Graph> TinyResidualGraph() {
  GraphBuilder b({kH, kW, kC});
  const int a = b.Conv2D("conv_a", b.input(), Conv(kF, 3, Padding::kSame));
  const int r = b.ReLU("relu_a", a);
  const int c = b.Conv2D("conv_c", r, Conv(kF, 3, Padding::kSame));
  const int s = b.Add("add", r, c);
  const int d = b.Add("double", s, s);
  BatchNormOptions bn;
  bn.momentum = 0.5f;
  const int n = b.BatchNormalization("bn", d, bn);
  const int g = b.GlobalAveragePooling2D("gap", n);
  return std::move(b).Finish(b.Dense("dense", g, Units(kClasses)));
}

// The same network in double; params in node order.
inline double TinyResidualLoss(const Vec& p, const std::vector<float>& x,
                               const std::vector<int32_t>& labels) {
  const int batch = static_cast<int>(labels.size());
  const RefWindow ga{batch, kH, kW, kC, 3, 3, 1, 1, 1, 1, kH, kW};
  const RefWindow gc{batch, kH, kW, kF, 3, 3, 1, 1, 1, 1, kH, kW};
  size_t o = 0;
  auto take = [&](size_t n) {
    Vec v = Slice(p, o, n);
    o += n;
    return v;
  };
  const Vec ka = take(9 * kC * kF), ba = take(kF);
  const Vec kc = take(9 * kF * kF), bc = take(kF);
  const Vec gamma = take(kF), beta = take(kF);
  const Vec kd = take(kF * kClasses), bd = take(kClasses);
  const Vec r = nn_test::RefRelu(
      nn_test::RefConv2D(nn_test::ToDouble(x), ga, ka, ba, kF));
  const Vec c = nn_test::RefConv2D(r, gc, kc, bc, kF);
  Vec d(r.size());
  for (size_t i = 0; i < d.size(); ++i) d[i] = 2 * (r[i] + c[i]);
  const Vec n =
      nn_test::RefBatchNormTraining(d, batch * kH * kW, kF, gamma, beta, 1e-3);
  Vec g(batch * kF, 0.0);
  for (int i = 0; i < batch; ++i)
    for (int q = 0; q < kH * kW; ++q)
      for (int f = 0; f < kF; ++f) {
        g[i * kF + f] += n[(i * kH * kW + q) * kF + f] / (kH * kW);
      }
  return nn_test::RefMeanCrossEntropy(
      nn_test::RefDense(g, batch, kF, kd, bd, kClasses), batch, kClasses,
      labels);
}

}  // namespace graph_test
}  // namespace lockstep

#endif  // LOCKSTEP_TESTS_UNIT_GRAPH_MODEL_TEST_UTIL_H_
