// An emulation of the part of cuBLAS that the CUDA device uses (see
// cuda_runtime_api.h in this directory): cublasSgemm as the column-major
// product cuBLAS defines, summed in double in a fixed order, so that the
// device's row-major-to-column-major mapping
// (worker/device/cuda/cuda_device.cc) is checked against the CPU device's
// OpenBLAS. Math modes are accepted and change nothing (no TF32 here).
#ifndef LOCKSTEP_TESTS_CUDA_EMULATION_CUBLAS_V2_H_
#define LOCKSTEP_TESTS_CUDA_EMULATION_CUBLAS_V2_H_

#include <cuda_runtime_api.h>

typedef struct cublasContext* cublasHandle_t;

// As cuBLAS declares it (a typedef'd unnamed enum), so that it mangles
// alike; see cudaError in emulated_blocks.h.
typedef enum {
  CUBLAS_STATUS_SUCCESS = 0,
  CUBLAS_STATUS_NOT_INITIALIZED = 1,
  CUBLAS_STATUS_ALLOC_FAILED = 3,
  CUBLAS_STATUS_INVALID_VALUE = 7,
  CUBLAS_STATUS_ARCH_MISMATCH = 8,
  CUBLAS_STATUS_NOT_SUPPORTED = 15,
} cublasStatus_t;

enum cublasOperation_t { CUBLAS_OP_N = 0, CUBLAS_OP_T = 1 };

enum cublasMath_t {
  CUBLAS_DEFAULT_MATH = 0,
  CUBLAS_TF32_TENSOR_OP_MATH = 3,
};

// A handle's stream, where its products queue (the emulated streams of
// emulated_streams.h: they run when the stream gets to them).
struct cublasContext {
  cudaStream_t stream = nullptr;
};

inline cublasStatus_t cublasCreate(cublasHandle_t* handle) {
  *handle = new cublasContext;
  return CUBLAS_STATUS_SUCCESS;
}
inline cublasStatus_t cublasDestroy(cublasHandle_t handle) {
  delete handle;
  return CUBLAS_STATUS_SUCCESS;
}
inline cublasStatus_t cublasSetStream(cublasHandle_t handle,
                                      cudaStream_t stream) {
  handle->stream = stream;
  return CUBLAS_STATUS_SUCCESS;
}
inline cublasStatus_t cublasSetMathMode(cublasHandle_t /*handle*/,
                                        cublasMath_t /*mode*/) {
  return CUBLAS_STATUS_SUCCESS;
}
inline const char* cublasGetStatusName(cublasStatus_t status) {
  return status == CUBLAS_STATUS_SUCCESS ? "CUBLAS_STATUS_SUCCESS"
                                         : "CUBLAS_STATUS_INVALID_VALUE";
}
inline const char* cublasGetStatusString(cublasStatus_t status) {
  return status == CUBLAS_STATUS_SUCCESS ? "success" : "emulated cuBLAS error";
}

// C (m x n) = alpha * op(A) * op(B) + beta * C, column-major, op(A) m x k.
// Refuses what cuBLAS refuses: negative sizes and leading dimensions
// smaller than the rows they hold.
inline cublasStatus_t cublasSgemm(cublasHandle_t handle,
                                  cublasOperation_t transa,
                                  cublasOperation_t transb, int m, int n, int k,
                                  const float* alpha, const float* a, int lda,
                                  const float* b, int ldb, const float* beta,
                                  float* c, int ldc) {
  if (handle == nullptr) return CUBLAS_STATUS_NOT_INITIALIZED;
  const int a_rows = transa == CUBLAS_OP_N ? m : k;
  const int b_rows = transb == CUBLAS_OP_N ? k : n;
  if (m < 0 || n < 0 || k < 0 || lda < (a_rows > 1 ? a_rows : 1) ||
      ldb < (b_rows > 1 ? b_rows : 1) || ldc < (m > 1 ? m : 1)) {
    return CUBLAS_STATUS_INVALID_VALUE;
  }
  // The matrices must be device memory, each inside one allocation.
  namespace emu = ::lockstep::cuda_emulation;
  const auto extent = [](int rows, int cols, int ld) {
    return (static_cast<size_t>(cols - 1) * ld + rows) * sizeof(float);
  };
  if (m > 0 && n > 0) {
    if (k > 0) {
      emu::RequireDevice(a, extent(a_rows, transa == CUBLAS_OP_N ? k : m, lda),
                         "cublasSgemm's A");
      emu::RequireDevice(b, extent(b_rows, transb == CUBLAS_OP_N ? n : k, ldb),
                         "cublasSgemm's B");
    }
    emu::RequireDevice(c, extent(m, n, ldc), "cublasSgemm's C");
  }
  // alpha and beta are host values, read now, as cuBLAS reads them.
  const double alpha_value = *alpha, beta_value = *beta;
  ::lockstep::cuda_emulation::Enqueue(handle->stream, [=] {
    for (int j = 0; j < n; ++j) {
      for (int i = 0; i < m; ++i) {
        double sum = 0.0;
        for (int p = 0; p < k; ++p) {
          const float av = transa == CUBLAS_OP_N
                               ? a[i + static_cast<size_t>(p) * lda]
                               : a[p + static_cast<size_t>(i) * lda];
          const float bv = transb == CUBLAS_OP_N
                               ? b[p + static_cast<size_t>(j) * ldb]
                               : b[j + static_cast<size_t>(p) * ldb];
          sum += static_cast<double>(av) * bv;
        }
        float& out = c[i + static_cast<size_t>(j) * ldc];
        // beta 0 ignores C, as cuBLAS does (it may hold NaN).
        out = static_cast<float>(
            alpha_value * sum +
            (beta_value == 0.0 ? 0.0 : beta_value * double{out}));
      }
    }
  });
  return CUBLAS_STATUS_SUCCESS;
}

#endif  // LOCKSTEP_TESTS_CUDA_EMULATION_CUBLAS_V2_H_
