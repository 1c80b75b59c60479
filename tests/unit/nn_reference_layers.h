// Reference layers for the tests of worker/model/nn, in double and NHWC,
// written straight from their definitions and sharing no code with
// worker/model/nn: convolution, pooling, batch normalization, dense, ReLU
// and the mean softmax cross-entropy.
#ifndef LOCKSTEP_TESTS_UNIT_NN_REFERENCE_LAYERS_H_
#define LOCKSTEP_TESTS_UNIT_NN_REFERENCE_LAYERS_H_

#include <algorithm>
#include <cmath>
#include <cstddef>
#include <limits>
#include <vector>

namespace lockstep {
namespace nn_test {

using Vec = std::vector<double>;

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

#endif  // LOCKSTEP_TESTS_UNIT_NN_REFERENCE_LAYERS_H_
