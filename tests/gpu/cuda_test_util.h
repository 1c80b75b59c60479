// Helpers shared by the CUDA tests: random data and closeness against the
// CPU device's results (from tests/unit/model_agreement.h), host vectors in
// and out of device buffers, a CUDA-beside-CPU fixture and a fixture per
// device.
#ifndef LOCKSTEP_TESTS_GPU_CUDA_TEST_UTIL_H_
#define LOCKSTEP_TESTS_GPU_CUDA_TEST_UTIL_H_

#include <algorithm>
#include <cmath>
#include <cstdint>
#include <memory>
#include <string>
#include <utility>
#include <vector>

#include "common/base/random.h"
#include "gtest/gtest.h"
#include "tests/unit/gpu_required.h"
#include "tests/unit/model_agreement.h"
#include "worker/device/cpu/cpu_device.h"
#include "worker/device/cuda/cuda_device.h"
#include "worker/device/device.h"
#include "worker/model/model.h"

namespace lockstep {
namespace cuda_test {

inline constexpr char kNeedsAGpu[] =
    "; the CUDA device tests need a GPU (run tests/gpu/device_check.sh on a "
    "GPU machine)";

using agreement::ByTensor;
using agreement::ExpectClose;
using agreement::kTolerance;
using agreement::RandomFloats;
using agreement::RandomLabels;

// Host vectors in and out of one device's buffers.
template <typename T>
inline std::unique_ptr<DeviceBuffer> Upload(Device& device,
                                            const std::vector<T>& v) {
  auto buffer = device.Allocate(v.size() * sizeof(T));
  EXPECT_TRUE(buffer.ok()) << buffer.status();
  if (!buffer.ok()) return nullptr;
  EXPECT_TRUE(
      device.CopyToDevice(v.data(), (*buffer)->data(), v.size() * sizeof(T))
          .ok());
  return std::move(*buffer);
}

template <typename T>
inline std::vector<T> Download(Device& device, const DeviceBuffer& buffer) {
  std::vector<T> v(buffer.bytes() / sizeof(T));
  EXPECT_TRUE(
      device.CopyToHost(buffer.data(), v.data(), v.size() * sizeof(T)).ok());
  return v;
}

// The CUDA device on GPU 0 (fp32 Gemm) next to a one-thread CPU device;
// skips the test where no GPU is visible (see tests/unit/gpu_required.h).
class CudaVsCpuTest : public ::testing::Test {
 protected:
  void SetUp() override {
    auto device = CreateCudaDevice(0, /*tf32=*/false);
    if (absl::IsFailedPrecondition(device.status())) {
      LOCKSTEP_SKIP_WITHOUT_GPU(device.status().ToString() + kNeedsAGpu);
    }
    ASSERT_TRUE(device.ok()) << device.status();
    cuda_ = std::move(*device);
  }

  std::unique_ptr<Device> cpu_ = CpuDevice::Create(1);
  std::unique_ptr<Device> cuda_;
};

// One device per test parameter: "cpu" (one thread) or "cuda" (GPU 0,
// fp32 Gemm; skipped where no GPU is visible), for checks that must hold
// on both.
class DeviceTest : public ::testing::TestWithParam<std::string> {
 protected:
  void SetUp() override {
    if (GetParam() == "cpu") {
      device_ = CpuDevice::Create(1);
      return;
    }
    auto device = CreateCudaDevice(0, /*tf32=*/false);
    if (absl::IsFailedPrecondition(device.status())) {
      LOCKSTEP_SKIP_WITHOUT_GPU(device.status().ToString() + kNeedsAGpu);
    }
    ASSERT_TRUE(device.ok()) << device.status();
    device_ = std::move(*device);
  }

  std::unique_ptr<Device> device_;
};

}  // namespace cuda_test
}  // namespace lockstep

#endif  // LOCKSTEP_TESTS_GPU_CUDA_TEST_UTIL_H_
