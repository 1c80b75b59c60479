// The CUDA emulation's device memory (tests/cuda_emulation/emulated_memory.h)
// stops a test where a GPU would fault or silently corrupt: host code
// touching device memory, kernels and copies past an allocation's end, a
// kernel handed pageable host memory, copies against their direction and
// cuBLAS matrices that do not fit. And it lets through what a GPU allows:
// kernels on device and pinned memory, copies inside an allocation. Shared
// memory, too, holds garbage until a block's threads write it.
#include <cublas_v2.h>
#include <cuda_runtime_api.h>

#include <csignal>
#include <cstdint>
#include <cstdlib>
#include <cstring>
#include <vector>

#include "gtest/gtest.h"
#include "worker/device/cuda/kernel_util.cuh"

namespace lockstep {
namespace {

// p[i] = value for i in [0, n).
__global__ void Fill(float* p, int64_t n, float value) {
  const int64_t i = static_cast<int64_t>(blockIdx.x) * blockDim.x + threadIdx.x;
  if (i < n) p[i] = value;
}

void LaunchFill(float* p, int64_t n, float value) {
  LOCKSTEP_LAUNCH_INDEPENDENT(Fill, (n + 63) / 64, 64, 0, nullptr)(p, n, value);
}

// Thread t of each block writes slot t of a shared array if t is even,
// syncs, and stores slot t: the odd slots were never written in this block.
__global__ void ReadShared(float* out) {
  __shared__ float slots[64];
  if (threadIdx.x % 2 == 0) slots[threadIdx.x] = 1.0f + blockIdx.x;
  __syncthreads();
  out[blockIdx.x * 64 + threadIdx.x] = slots[threadIdx.x];
}

float* DeviceFloats(size_t n) {
  void* p = nullptr;
  EXPECT_EQ(cudaMalloc(&p, n * sizeof(float)), cudaSuccess);
  return static_cast<float*>(p);
}

std::vector<float> Read(const float* device, size_t n) {
  std::vector<float> host(n);
  EXPECT_EQ(cudaMemcpy(host.data(), device, n * sizeof(float),
                       cudaMemcpyDeviceToHost),
            cudaSuccess);
  return host;
}

class CudaEmulationTest : public ::testing::Test {
 protected:
  void SetUp() override {
    // The emulation's kernels run on a pool of threads; a forked child
    // must start afresh.
    GTEST_FLAG_SET(death_test_style, "threadsafe");
  }
};

TEST_F(CudaEmulationTest, KernelsAndCopiesReachDeviceMemory) {
  float* p = DeviceFloats(100);
  LaunchFill(p, 100, 2.5f);
  EXPECT_EQ(Read(p, 100), std::vector<float>(100, 2.5f));
  const std::vector<float> host = {1, 2, 3, 4};
  ASSERT_EQ(cudaMemcpy(p + 96, host.data(), 16, cudaMemcpyHostToDevice),
            cudaSuccess);
  ASSERT_EQ(cudaMemcpy(p, p + 96, 16, cudaMemcpyDeviceToDevice), cudaSuccess);
  const std::vector<float> back = Read(p, 100);
  EXPECT_EQ(std::vector<float>(back.begin(), back.begin() + 4), host);
  EXPECT_EQ(std::vector<float>(back.begin() + 96, back.end()), host);
  EXPECT_EQ(cudaFree(p), cudaSuccess);
}

TEST_F(CudaEmulationTest, NewDeviceMemoryHoldsNan) {
  float* p = DeviceFloats(10);
  for (float x : Read(p, 10)) {
    uint32_t bits = 0;
    std::memcpy(&bits, &x, sizeof(bits));
    EXPECT_EQ(bits, 0xFFFFFFFFu);
  }
  cudaFree(p);
}

// As on a GPU, shared memory is not cleared between blocks: what no thread
// of a block wrote holds 0xFF bytes, not zeros or the last block's values.
TEST_F(CudaEmulationTest, SharedMemoryNobodyWroteHoldsNan) {
  float* p = DeviceFloats(128);
  LOCKSTEP_LAUNCH(ReadShared, 2, 64, 0, nullptr)(p);
  const std::vector<float> out = Read(p, 128);
  for (int i = 0; i < 128; ++i) {
    uint32_t bits = 0;
    std::memcpy(&bits, &out[i], sizeof(bits));
    if (i % 2 == 0) {
      EXPECT_EQ(out[i], 1.0f + i / 64) << i;
    } else {
      EXPECT_EQ(bits, 0xFFFFFFFFu) << i;
    }
  }
  cudaFree(p);
}

TEST_F(CudaEmulationTest, KernelsReachPinnedHostMemory) {
  void* pinned = nullptr;
  ASSERT_EQ(cudaHostAlloc(&pinned, 8 * sizeof(float), cudaHostAllocPortable),
            cudaSuccess);
  LaunchFill(static_cast<float*>(pinned), 8, -1.5f);
  EXPECT_EQ(std::vector<float>(static_cast<float*>(pinned),
                               static_cast<float*>(pinned) + 8),
            std::vector<float>(8, -1.5f));
  cudaFreeHost(pinned);
}

TEST_F(CudaEmulationTest, HostCodeTouchingDeviceMemoryStops) {
  float* p = DeviceFloats(4);
  EXPECT_DEATH(
      {
        volatile float* v = p;
        v[1] = 1.0f;
      },
      "host code touched device memory at .*, in the 16-byte device "
      "allocation");
  EXPECT_DEATH(
      {
        volatile float* v = p;
        const float x = v[0];
        (void)x;
      },
      "host code touched device memory");
  cudaFree(p);
}

// The handler passes on what it does not own: a SIGSEGV sent by raise (no
// fault address) still ends the process.
TEST_F(CudaEmulationTest, ARaisedSigsegvStillKills) {
  EXPECT_EXIT(
      {
        float* p = DeviceFloats(4);  // Installs the handler.
        raise(SIGSEGV);
        cudaFree(p);
        std::exit(0);
      },
      ::testing::KilledBySignal(SIGSEGV), "");
}

TEST_F(CudaEmulationTest, AKernelPastTheEndStops) {
  // 256 bytes end at the guard page: the write past them faults.
  float* p = DeviceFloats(64);
  EXPECT_DEATH(LaunchFill(p, 65, 1.0f),
               "a kernel, copy or cuBLAS call reached .*, past the end of the "
               "256-byte device allocation");
  cudaFree(p);
  // 100 bytes end inside the 256 cudaMalloc rounds to: the write lands in
  // the padding, which cudaFree checks.
  EXPECT_DEATH(
      {
        float* q = DeviceFloats(25);
        LaunchFill(q, 26, 1.0f);
        cudaFree(q);
      },
      "wrote outside the 100-byte device allocation at .*, 0 bytes past its "
      "end");
}

TEST_F(CudaEmulationTest, AKernelGivenPageableHostMemoryStops) {
  std::vector<float> host(8);
  EXPECT_DEATH(LaunchFill(host.data(), 8, 1.0f),
               "kernel Fill: argument 0 .* is pageable host memory");
}

TEST_F(CudaEmulationTest, BadCopiesStop) {
  float* p = DeviceFloats(25);
  std::vector<float> host(26);
  EXPECT_DEATH(
      cudaMemcpy(p, host.data(), 26 * sizeof(float), cudaMemcpyHostToDevice),
      "cudaMemcpy destination: 104 bytes at .* are not inside one "
      "device allocation");
  EXPECT_DEATH(cudaMemcpy(host.data(), p + 1, 25 * sizeof(float),
                          cudaMemcpyDeviceToHost),
               "cudaMemcpy source: 100 bytes");
  EXPECT_DEATH(
      cudaMemcpy(host.data(), p, sizeof(float), cudaMemcpyHostToDevice),
      "cudaMemcpy source: .* is device memory, but the copy's direction says "
      "host");
  EXPECT_DEATH(cudaMemsetAsync(p, 0, 101), "cudaMemset: 101 bytes");
  EXPECT_DEATH(
      {
        void* not_allocated = host.data();
        cudaFree(not_allocated);
      },
      "cudaFree of .*, which no cudaMalloc returned");
  cudaFree(p);
}

TEST_F(CudaEmulationTest, CublasMatricesMustFitTheirAllocations) {
  cublasHandle_t handle = nullptr;
  ASSERT_EQ(cublasCreate(&handle), CUBLAS_STATUS_SUCCESS);
  // C = A B with A 2 x 3, B 3 x 2, C 2 x 2, column-major.
  float* a = DeviceFloats(6);
  float* b = DeviceFloats(6);
  float* c = DeviceFloats(4);
  const std::vector<float> a_host = {1, 2, 3, 4, 5, 6};
  const std::vector<float> b_host = {1, 0, -1, 2, 1, 0};
  cudaMemcpy(a, a_host.data(), 24, cudaMemcpyHostToDevice);
  cudaMemcpy(b, b_host.data(), 24, cudaMemcpyHostToDevice);
  const float one = 1, zero = 0;
  // beta 0: C's NaN is not read.
  ASSERT_EQ(cublasSgemm(handle, CUBLAS_OP_N, CUBLAS_OP_N, 2, 2, 3, &one, a, 2,
                        b, 3, &zero, c, 2),
            CUBLAS_STATUS_SUCCESS);
  EXPECT_EQ(Read(c, 4), (std::vector<float>{-4, -4, 5, 8}));
  // A leading dimension of 3 makes A 3 x 3 in memory: 8 floats, not 6.
  EXPECT_DEATH(cublasSgemm(handle, CUBLAS_OP_N, CUBLAS_OP_N, 2, 2, 3, &one, a,
                           3, b, 3, &zero, c, 2),
               "cublasSgemm's A: 32 bytes");
  std::vector<float> host_c(4);
  EXPECT_DEATH(cublasSgemm(handle, CUBLAS_OP_N, CUBLAS_OP_N, 2, 2, 3, &one, a,
                           2, b, 3, &zero, host_c.data(), 2),
               "cublasSgemm's C: 16 bytes at .* are not inside one device");
  cudaFree(a);
  cudaFree(b);
  cudaFree(c);
  cublasDestroy(handle);
}

}  // namespace
}  // namespace lockstep
