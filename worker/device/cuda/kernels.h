// The CUDA device's own kernels, reached through plain host launchers (as in
// gloo's cudaSum): each enqueues its kernel(s) on `stream` and returns
// cudaGetLastError(), which the caller checks with CUDA_RETURN_IF_ERROR.
//
// Launchers expect non-empty shapes (the device returns early for empty
// ones) and device pointers; matrices are row-major, as in Device.
#ifndef LOCKSTEP_WORKER_DEVICE_CUDA_KERNELS_H_
#define LOCKSTEP_WORKER_DEVICE_CUDA_KERNELS_H_

#include <cuda_runtime_api.h>

#include <cstddef>
#include <cstdint>

namespace lockstep {
namespace cuda_internal {

// What SoftmaxCrossEntropy reads back to the host, in device memory.
struct SoftmaxResult {
  double loss_sum;    // Sum of the rows' losses.
  long long correct;  // Rows whose arg-max equals the label.
  int bad_row;        // First row with a label outside [0, cols), or -1.
  int bad_label;      // Its label.
};

// x[r][c] += bias[c].
cudaError_t LaunchAddBias(int rows, int cols, const float* bias, float* x,
                          cudaStream_t stream);

// y = max(x, 0); y may be x.
cudaError_t LaunchReluForward(size_t n, const float* x, float* y,
                              cudaStream_t stream);

// dx = dy where activation > 0, else 0; dx may be dy.
cudaError_t LaunchReluBackward(size_t n, const float* activation,
                               const float* dy, float* dx,
                               cudaStream_t stream);

// Softmax cross-entropy as Device::SoftmaxCrossEntropy defines it. Fills
// *result (bad_row first: when some label is out of range, nothing else is
// written, grad_logits included). `row_loss` and `row_hit` are scratch of
// `rows` entries; grad_logits may be null.
cudaError_t LaunchSoftmaxCrossEntropy(int rows, int cols, const float* logits,
                                      const int32_t* labels, float grad_scale,
                                      float* grad_logits, double* row_loss,
                                      int* row_hit, SoftmaxResult* result,
                                      cudaStream_t stream);

}  // namespace cuda_internal
}  // namespace lockstep

#endif  // LOCKSTEP_WORKER_DEVICE_CUDA_KERNELS_H_
