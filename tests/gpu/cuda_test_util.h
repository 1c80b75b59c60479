// Helpers shared by the CUDA tests: random data, closeness against the CPU
// device's results, and host vectors in and out of device buffers.
#ifndef LOCKSTEP_TESTS_GPU_CUDA_TEST_UTIL_H_
#define LOCKSTEP_TESTS_GPU_CUDA_TEST_UTIL_H_

#include <algorithm>
#include <cmath>
#include <cstdint>
#include <memory>
#include <string>
#include <utility>
#include <vector>

#include "common/random.h"
#include "gtest/gtest.h"
#include "worker/cpu_device.h"
#include "worker/cuda/cuda_device.h"
#include "worker/device.h"
#include "worker/model.h"

namespace lockstep {
namespace cuda_test {

inline constexpr char kNoGpu[] =
    "no CUDA GPU is visible to this process; the CUDA device tests need one "
    "(run tests/gpu/device_check.sh on a GPU machine)";
inline constexpr double kTolerance = 1e-5;

inline std::vector<float> RandomFloats(size_t n, uint64_t seed,
                                       float lo = -1.0f, float hi = 1.0f) {
  Random random(seed);
  std::vector<float> v(n);
  for (float& x : v) {
    do {
      x = random.Uniform(lo, hi);
    } while (x == 0.0f);  // Non-zero, so every entry is seen to matter.
  }
  return v;
}

inline std::vector<int32_t> RandomLabels(size_t n, int classes, uint64_t seed) {
  Random random(seed);
  std::vector<int32_t> v(n);
  for (int32_t& y : v) y = static_cast<int32_t>(random.UniformInt(classes));
  return v;
}

// |got - want| <= tolerance * scale for every entry, where scale is
// max |want|, or min_scale if that is larger (for a tensor whose true
// values are zero, such as a bias that batch norm cancels, and whose
// entries are rounding residue on either device).
inline void ExpectClose(const std::vector<float>& got,
                        const std::vector<float>& want, const std::string& what,
                        double tolerance = kTolerance, double min_scale = 0.0) {
  ASSERT_EQ(got.size(), want.size()) << what;
  double scale = min_scale;
  for (float w : want) scale = std::max(scale, std::abs(double{w}));
  ASSERT_GT(scale, 0.0) << what << ": all zeros proves nothing";
  int reported = 0;
  for (size_t i = 0; i < got.size(); ++i) {
    if (std::abs(double{got[i]} - want[i]) > tolerance * scale &&
        ++reported <= 5) {
      ADD_FAILURE() << what << "[" << i << "]: got " << got[i] << ", want "
                    << want[i] << " (scale " << scale << ")";
    }
  }
}

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
// skips the test where no GPU is visible.
class CudaVsCpuTest : public ::testing::Test {
 protected:
  void SetUp() override {
    if (CudaDeviceCount() == 0) GTEST_SKIP() << kNoGpu;
    auto device = CreateCudaDevice(0, /*tf32=*/false);
    ASSERT_TRUE(device.ok()) << device.status();
    cuda_ = std::move(*device);
  }

  std::unique_ptr<Device> cpu_ = CpuDevice::Create(1);
  std::unique_ptr<Device> cuda_;
};

// Splits a flat parameter vector into the model's tensors.
inline std::vector<std::vector<float>> ByTensor(
    const Model& model, const std::vector<float>& flat) {
  std::vector<std::vector<float>> pieces;
  auto it = flat.begin();
  for (const TensorInfo& t : model.Tensors()) {
    int64_t size = 1;
    for (int64_t d : t.shape) size *= d;
    pieces.emplace_back(it, it + size);
    it += size;
  }
  return pieces;
}

}  // namespace cuda_test
}  // namespace lockstep

#endif  // LOCKSTEP_TESTS_GPU_CUDA_TEST_UTIL_H_
