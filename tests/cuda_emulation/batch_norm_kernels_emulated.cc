// worker/device/cuda/batch_norm_kernels.cu compiled as C++ against the CUDA
// emulation (cuda_runtime_api.h in this directory).
#include "worker/device/cuda/batch_norm_kernels.cu"
