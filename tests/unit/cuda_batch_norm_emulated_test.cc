// The CUDA device's batch-normalization kernels
// (worker/device/cuda/batch_norm_kernels.h) run on the CPU through the CUDA
// emulation of tests/cuda_emulation, against the CPU's batch-norm ops: the
// training pass, its backward pass and the inference pass, each within
// rounding of the CPU's.
#include <cuda_runtime_api.h>

#include <vector>

#include "gtest/gtest.h"
#include "tests/unit/cuda_emulated_test_util.h"
#include "worker/device/cpu/cpu_batch_norm_ops.h"
#include "worker/device/cuda/batch_norm_kernels.h"

namespace lockstep {
namespace {

// One batch's operands on the host and, for the kernels, on the device.
struct BatchNormOperands {
  BatchNormOperands(int rows, int channels, float offset)
      : rows(rows),
        channels(channels),
        x(Shifted(RandomFloats(size_t{1} * rows * channels, 6), offset)),
        dy(RandomFloats(x.size(), 7)),
        gamma(RandomFloats(channels, 8, 0.5f, 1.5f)),
        beta(RandomFloats(channels, 9)),
        moving_mean(RandomFloats(channels, 10)),
        moving_var(RandomFloats(channels, 11, 0.1f, 1)),
        scratch(cuda_internal::BatchNormScratchBytes(rows, channels)),
        d_x(x),
        d_dy(dy),
        d_gamma(gamma),
        d_beta(beta) {}

  static std::vector<float> Shifted(std::vector<float> v, float offset) {
    for (float& value : v) value += offset;
    return v;
  }

  const int rows, channels;
  const std::vector<float> x, dy, gamma, beta, moving_mean, moving_var;
  const OnDevice<char> scratch;
  const OnDevice<float> d_x, d_dy, d_gamma, d_beta;
};

// The CPU's statistics saved by the training pass, for the backward pass.
struct SavedStatistics {
  std::vector<float> mean, inv_std;
};

// The training pass on both; `saved` gets the CPU's saved statistics.
void ExpectTrainingMatches(const BatchNormOperands& in,
                           SavedStatistics* saved) {
  const int rows = in.rows, channels = in.channels;
  struct Outputs {
    std::vector<float> y, mean, var, saved_mean, saved_inv_std;
  };
  Outputs want{std::vector<float>(in.x.size()), in.moving_mean, in.moving_var,
               std::vector<float>(channels), std::vector<float>(channels)};
  const OnDevice<float> y_got(in.x.size()), mean_got(in.moving_mean),
      var_got(in.moving_var), saved_mean_got(channels),
      saved_inv_std_got(channels);
  ASSERT_TRUE(cpu_ops::BatchNormTraining(
                  rows, channels, in.x.data(), in.gamma.data(), in.beta.data(),
                  1e-3f, 0.99f, want.y.data(), want.mean.data(),
                  want.var.data(), want.saved_mean.data(),
                  want.saved_inv_std.data())
                  .ok());
  ASSERT_EQ(cuda_internal::LaunchBatchNormTraining(
                rows, channels, in.d_x.get(), in.d_gamma.get(), in.d_beta.get(),
                1e-3f, 0.99f, y_got.get(), mean_got.get(), var_got.get(),
                saved_mean_got.get(), saved_inv_std_got.get(), in.scratch.get(),
                nullptr),
            cudaSuccess);
  ExpectClose(y_got.Read(), want.y, 1e-5, "y");
  ExpectClose(mean_got.Read(), want.mean, 1e-6, "moving mean");
  ExpectClose(var_got.Read(), want.var, 1e-6, "moving variance");
  ExpectClose(saved_mean_got.Read(), want.saved_mean, 1e-6, "saved mean");
  ExpectClose(saved_inv_std_got.Read(), want.saved_inv_std, 1e-5,
              "saved 1/std");
  *saved = SavedStatistics{want.saved_mean, want.saved_inv_std};
}

// The backward pass on both, given the CPU's saved statistics.
void ExpectBackwardMatches(const BatchNormOperands& in,
                           const SavedStatistics& saved) {
  const int rows = in.rows, channels = in.channels;
  std::vector<float> dx_want(in.x.size()), dgamma_want(channels),
      dbeta_want(channels);
  const OnDevice<float> dx_got(in.x.size()), dgamma_got(channels),
      dbeta_got(channels);
  const OnDevice<float> saved_mean(saved.mean), saved_inv_std(saved.inv_std);
  ASSERT_TRUE(cpu_ops::BatchNormBackward(
                  rows, channels, in.x.data(), in.dy.data(), in.gamma.data(),
                  saved.mean.data(), saved.inv_std.data(), dx_want.data(),
                  dgamma_want.data(), dbeta_want.data())
                  .ok());
  ASSERT_EQ(cuda_internal::LaunchBatchNormBackward(
                rows, channels, in.d_x.get(), in.d_dy.get(), in.d_gamma.get(),
                saved_mean.get(), saved_inv_std.get(), dx_got.get(),
                dgamma_got.get(), dbeta_got.get(), in.scratch.get(), nullptr),
            cudaSuccess);
  ExpectClose(dx_got.Read(), dx_want, 1e-4, "dx");
  ExpectClose(dgamma_got.Read(), dgamma_want, 1e-5, "dgamma");
  ExpectClose(dbeta_got.Read(), dbeta_want, 1e-5, "dbeta");
}

// The inference pass on both, with the moving statistics.
void ExpectInferenceMatches(const BatchNormOperands& in) {
  std::vector<float> inference_want(in.x.size());
  const OnDevice<float> inference_got(in.x.size()),
      d_moving_mean(in.moving_mean), d_moving_var(in.moving_var);
  ASSERT_TRUE(cpu_ops::BatchNormInference(
                  in.rows, in.channels, in.x.data(), in.gamma.data(),
                  in.beta.data(), in.moving_mean.data(), in.moving_var.data(),
                  1e-3f, inference_want.data())
                  .ok());
  ASSERT_EQ(cuda_internal::LaunchBatchNormInference(
                in.rows, in.channels, in.d_x.get(), in.d_gamma.get(),
                in.d_beta.get(), d_moving_mean.get(), d_moving_var.get(), 1e-3f,
                inference_got.get(), in.scratch.get(), nullptr),
            cudaSuccess);
  ExpectClose(inference_got.Read(), inference_want, 1e-6, "inference y");
}

// Batch statistics are summed in double in tiles of rows on the GPU, in
// float (in order) on the CPU: close, not equal. 3000 rows make several
// tiles; an offset of 20 tests the variance's cancellation.
TEST_F(CudaKernelsEmulatedTest, BatchNormMatchesTheCpu) {
  struct Case {
    int rows, channels;
    float offset;
  };
  for (const Case& c : {Case{1, 1, 0.0f}, Case{18, 4, 0.0f},
                        Case{257, 37, 20.0f}, Case{3000, 2, -3.0f}}) {
    SCOPED_TRACE(::testing::Message() << c.rows << " x " << c.channels);
    const BatchNormOperands in(c.rows, c.channels, c.offset);
    SavedStatistics saved;
    ASSERT_NO_FATAL_FAILURE(ExpectTrainingMatches(in, &saved));
    ASSERT_NO_FATAL_FAILURE(ExpectBackwardMatches(in, saved));
    ASSERT_NO_FATAL_FAILURE(ExpectInferenceMatches(in));
  }
}

}  // namespace
}  // namespace lockstep
