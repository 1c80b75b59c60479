// Every device refuses the same bad calls with the same status and message
// (the checks live once, in worker/device/device_checks.cc), and does
// nothing on an empty call whatever its pointers.
#include <cstdint>
#include <string>
#include <vector>

#include "absl/status/status.h"
#include "gtest/gtest.h"
#include "tests/gpu/cuda_test_util.h"

namespace lockstep {
namespace {

using cuda_test::CudaVsCpuTest;

struct BadCall {
  const char* name;
  const char* message;
  absl::Status (*run)(Device& device, float* buffer);
};

// `buffer` is a device buffer of at least 16 floats.
const BadCall kBadCalls[] = {
    {"gemm negative", "Gemm: negative size m=-1 n=2 k=2",
     [](Device& d, float* b) {
       return d.Gemm(false, false, -1, 2, 2, 1, b, b, 0, b);
     }},
    {"gemm null a", "Gemm: null pointer",
     [](Device& d, float* b) {
       return d.Gemm(false, false, 2, 2, 2, 1, nullptr, b, 0, b);
     }},
    {"gemm null c", "Gemm: null pointer",
     [](Device& d, float* b) {
       return d.Gemm(false, false, 2, 2, 0, 1, b, b, 0, nullptr);
     }},
    {"add bias negative", "AddBias: negative shape 2 x -3",
     [](Device& d, float* b) { return d.AddBias(2, -3, b, b); }},
    {"add bias null", "AddBias: null pointer",
     [](Device& d, float* b) { return d.AddBias(2, 3, nullptr, b); }},
    {"relu null", "ReluForward: null pointer",
     [](Device& d, float*) { return d.ReluForward(4, nullptr); }},
    {"relu into null", "ReluForward: null pointer",
     [](Device& d, float* b) { return d.ReluForwardInto(4, b, nullptr); }},
    {"relu backward null", "ReluBackward: null pointer",
     [](Device& d, float* b) { return d.ReluBackward(4, nullptr, b); }},
    {"relu backward into null", "ReluBackward: null pointer",
     [](Device& d, float* b) { return d.ReluBackwardInto(4, b, nullptr, b); }},
    {"bias gradient negative", "BiasGradient: negative shape -1 x 3",
     [](Device& d, float* b) { return d.BiasGradient(-1, 3, b, b); }},
    {"bias gradient null", "BiasGradient: null pointer",
     [](Device& d, float* b) { return d.BiasGradient(2, 3, b, nullptr); }},
    {"copy to device null", "CopyToDevice: null pointer",
     [](Device& d, float* b) { return d.CopyToDevice(nullptr, b, 4); }},
    {"copy to host null", "CopyToHost: null pointer",
     [](Device& d, float* b) { return d.CopyToHost(b, nullptr, 4); }},
    {"copy to host async null", "CopyToHostAsync: null pointer",
     [](Device& d, float* b) { return d.CopyToHostAsync(b, nullptr, 4); }},
    {"copy on device null", "CopyOnDevice: null pointer",
     [](Device& d, float* b) { return d.CopyOnDevice(nullptr, b, 4); }},
    {"axpy null", "Axpy: null pointer",
     [](Device& d, float* b) { return d.Axpy(4, 1, nullptr, b); }},
};

TEST_F(CudaVsCpuTest, BadCallsAreRefusedAlikeOnEveryDevice) {
  for (Device* device : {cpu_.get(), cuda_.get()}) {
    auto buffer = device->Allocate(16 * sizeof(float));
    ASSERT_TRUE(buffer.ok()) << buffer.status();
    for (const BadCall& call : kBadCalls) {
      SCOPED_TRACE(device->Name() + ": " + call.name);
      const absl::Status status = call.run(*device, (*buffer)->As<float>());
      EXPECT_EQ(status.code(), absl::StatusCode::kInvalidArgument) << status;
      EXPECT_EQ(status.message(), call.message);
    }
    ASSERT_TRUE(device->Synchronize().ok());
  }
}

TEST_F(CudaVsCpuTest, EmptyCallsAreNoOpsWithNullPointers) {
  for (Device* device : {cpu_.get(), cuda_.get()}) {
    SCOPED_TRACE(device->Name());
    EXPECT_TRUE(
        device->Gemm(false, false, 0, 3, 2, 1, nullptr, nullptr, 0, nullptr)
            .ok());
    EXPECT_TRUE(device->AddBias(0, 3, nullptr, nullptr).ok());
    EXPECT_TRUE(device->ReluForward(0, nullptr).ok());
    EXPECT_TRUE(device->ReluBackwardInto(0, nullptr, nullptr, nullptr).ok());
    EXPECT_TRUE(device->BiasGradient(3, 0, nullptr, nullptr).ok());
    EXPECT_TRUE(device->CopyToDevice(nullptr, nullptr, 0).ok());
    EXPECT_TRUE(device->CopyToHost(nullptr, nullptr, 0).ok());
    EXPECT_TRUE(device->CopyToHostAsync(nullptr, nullptr, 0).ok());
    ASSERT_TRUE(device->Synchronize().ok());
  }
}

// Zero rows still write the bias gradient: the sum of nothing is zero.
TEST_F(CudaVsCpuTest, BiasGradientOfNoRowsIsZeroOnEveryDevice) {
  for (Device* device : {cpu_.get(), cuda_.get()}) {
    SCOPED_TRACE(device->Name());
    const std::vector<float> ones(3, 1.0f);
    auto out = cuda_test::Upload(*device, ones);
    ASSERT_NE(out, nullptr);
    ASSERT_TRUE(device->BiasGradient(0, 3, nullptr, out->As<float>()).ok());
    ASSERT_TRUE(device->Synchronize().ok());
    EXPECT_EQ(cuda_test::Download<float>(*device, *out),
              std::vector<float>(3, 0.0f));
  }
}

}  // namespace
}  // namespace lockstep
