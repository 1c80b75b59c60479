// Helpers for the tests that run the CUDA device's kernels on the CPU
// through tests/cuda_emulation: seeded random operands (random_floats.h), a
// closeness check scaled by the expected values, kernel operands in emulated
// device memory, and the fixture holding the CPU device the kernels are
// checked against.
#ifndef LOCKSTEP_TESTS_UNIT_CUDA_EMULATED_TEST_UTIL_H_
#define LOCKSTEP_TESTS_UNIT_CUDA_EMULATED_TEST_UTIL_H_

#include <cuda_runtime_api.h>

#include <algorithm>
#include <cmath>
#include <cstdint>
#include <cstdlib>
#include <memory>
#include <string>
#include <vector>

#include "gtest/gtest.h"
#include "tests/unit/random_floats.h"
#include "worker/device/cpu/cpu_device.h"

namespace lockstep {

// |got - want| <= tolerance * max |want|, element by element.
inline void ExpectClose(const std::vector<float>& got,
                        const std::vector<float>& want, double tolerance,
                        const std::string& what) {
  ASSERT_EQ(got.size(), want.size()) << what;
  double scale = 0;
  for (float w : want) scale = std::max(scale, std::fabs(double{w}));
  for (size_t i = 0; i < got.size(); ++i) {
    ASSERT_LE(std::fabs(double{got[i]} - want[i]), tolerance * scale)
        << what << ", element " << i << ": " << got[i] << " vs " << want[i];
  }
}

// A kernel operand in device memory: a copy of a host vector, or `n`
// elements nobody has written yet; Read() copies it back.
template <typename T>
class OnDevice {
 public:
  explicit OnDevice(size_t n) : n_(n) {
    void* p = nullptr;
    if (cudaMalloc(&p, n * sizeof(T)) != cudaSuccess) std::abort();
    p_ = static_cast<T*>(p);
  }
  explicit OnDevice(const std::vector<T>& host) : OnDevice(host.size()) {
    if (cudaMemcpy(p_, host.data(), n_ * sizeof(T), cudaMemcpyHostToDevice) !=
        cudaSuccess) {
      std::abort();
    }
  }
  ~OnDevice() { cudaFree(p_); }
  OnDevice(const OnDevice&) = delete;
  OnDevice& operator=(const OnDevice&) = delete;

  T* get() const { return p_; }
  std::vector<T> Read() const {
    std::vector<T> host(n_);
    if (cudaMemcpy(host.data(), p_, n_ * sizeof(T), cudaMemcpyDeviceToHost) !=
        cudaSuccess) {
      std::abort();
    }
    return host;
  }

 private:
  size_t n_;
  T* p_ = nullptr;
};

// The CPU device the kernels' results are checked against.
class CudaKernelsEmulatedTest : public ::testing::Test {
 protected:
  std::unique_ptr<Device> cpu_ = CpuDevice::Create(1, CpuConv::kIm2Col);
};

}  // namespace lockstep

#endif  // LOCKSTEP_TESTS_UNIT_CUDA_EMULATED_TEST_UTIL_H_
