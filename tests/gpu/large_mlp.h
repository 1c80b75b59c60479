// The large-MLP figures of lockstep_gpu_bench: forward + backward TFLOP/s
// of an MLP on one device, of the device math alone and of
// Mlp::ComputeGradients, and the device's Gemm rate on n x n x n.
#ifndef LOCKSTEP_TESTS_GPU_LARGE_MLP_H_
#define LOCKSTEP_TESTS_GPU_LARGE_MLP_H_

#include <vector>

#include "absl/status/statusor.h"
#include "worker/device/device.h"

namespace lockstep {
namespace bench {

// Flops of forward + backward of an MLP on `batch` rows: per layer the
// forward product and the kernel gradient, plus the input gradient for every
// layer but the first.
double MlpFlops(const std::vector<int>& sizes, int batch);

struct LargeFigures {
  double math_tflops = 0;  // Forward + backward on the device alone.
  double step_tflops = 0;  // Mlp::ComputeGradients, host copies included.
};

// The MLP 8192-8192-8192-10 on `batch` rows, `steps` timed steps each way.
absl::StatusOr<LargeFigures> LargeMlp(Device& device, int batch, int steps);

// TFLOP/s of c = a . b, n x n x n, as the device's Gemm (plain cuBLAS sgemm
// on the CUDA device) runs it.
absl::StatusOr<double> SgemmRate(Device& device, int n, int reps);

}  // namespace bench
}  // namespace lockstep

#endif  // LOCKSTEP_TESTS_GPU_LARGE_MLP_H_
