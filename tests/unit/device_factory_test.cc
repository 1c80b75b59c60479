// The device factory (worker/device/device_factory.h): which device each
// kind names, the CPU's conv workspace, and the options it refuses.
#include "worker/device/device_factory.h"

#include <string>

#include "absl/status/status.h"
#include "gmock/gmock.h"
#include "gtest/gtest.h"
#include "worker/device/cpu/cpu_device.h"

namespace lockstep {
namespace {

using ::testing::HasSubstr;

// Whether this build has CUDA and this machine a GPU is the factory's
// secret, so the tests take "cuda"'s answer as given and check the rest
// against it.
TEST(DeviceFactoryTest, CudaIsTheGpuOrAClearFailedPrecondition) {
  DeviceOptions options;
  options.kind = "cuda";
  auto device = CreateDevice(options);
  if (device.ok()) {
    EXPECT_THAT((*device)->Name(), HasSubstr("cuda"));
    return;
  }
  EXPECT_EQ(device.status().code(), absl::StatusCode::kFailedPrecondition);
  EXPECT_THAT(std::string(device.status().message()), HasSubstr("CUDA"));
}

TEST(DeviceFactoryTest, CpuGivesTheCpuAndAutoPrefersTheGpu) {
  DeviceOptions options;
  options.kind = "cuda";
  const bool have_gpu = CreateDevice(options).ok();
  options.cpu_threads = 1;
  options.kind = "cpu";
  auto cpu = CreateDevice(options);
  ASSERT_TRUE(cpu.ok()) << cpu.status();
  EXPECT_THAT((*cpu)->Name(), HasSubstr("cpu"));
  options.kind = "auto";
  auto automatic = CreateDevice(options);
  ASSERT_TRUE(automatic.ok()) << automatic.status();
  EXPECT_THAT((*automatic)->Name(), HasSubstr(have_gpu ? "cuda" : "cpu"));
}

TEST(DeviceFactoryTest, TheCpuGetsACacheSizedConvWorkspace) {
  DeviceOptions options;
  options.kind = "cpu";
  auto cpu = CreateDevice(options);
  ASSERT_TRUE(cpu.ok()) << cpu.status();
  EXPECT_EQ(ConvWorkspaceFloatsFor(**cpu), CpuDevice::kConvWorkspaceFloats);
}

TEST(DeviceFactoryTest, RejectsBadOptions) {
  DeviceOptions options;
  options.kind = "tpu";
  EXPECT_EQ(CreateDevice(options).status().code(),
            absl::StatusCode::kInvalidArgument);
  options.kind = "cpu";
  options.cpu_threads = 0;
  EXPECT_EQ(CreateDevice(options).status().code(),
            absl::StatusCode::kInvalidArgument);
  options.cpu_threads = 1;
  options.cpu_conv = "winograd";
  EXPECT_EQ(CreateDevice(options).status().code(),
            absl::StatusCode::kInvalidArgument);
}

TEST(DeviceFactoryTest, Im2ColTurnsTheDirectConvolutionsOff) {
  DeviceOptions options;
  options.kind = "cpu";
  options.cpu_conv = "im2col";
  auto cpu = CreateDevice(options);
  ASSERT_TRUE(cpu.ok()) << cpu.status();
  EXPECT_EQ((*cpu)->Name(), "cpu (OpenBLAS, 1 thread)");
}

}  // namespace
}  // namespace lockstep
