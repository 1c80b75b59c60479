// Training through real lockstep_server processes with workers on
// "--device=cuda", where the CUDA device is emulated on the CPU
// (lockstep_worker_emulated_gpu, tests/cuda_emulation): the worker's whole
// GPU path -- device buffers, uploads and downloads, gradients handed to
// the pushes as backprop produces them -- next to the CPU device, on every
// machine. The emulated streams run each call at once, so what this cannot
// show is an ordering bug between streams; device_check.sh on a GPU can.
#include <string>
#include <vector>

#include "gtest/gtest.h"
#include "tests/integration/training_jobs.h"

namespace lockstep {
namespace {

const char kGpuWorker[] = "lockstep_worker_emulated_gpu";

// The tutorial-shaped MLP on the emulated GPU ends where the CPU device
// does: the same initial weights and batches, and gradients that differ
// only in rounding (cuBLAS's products are summed in another order).
TEST(EmulatedGpuTrainingTest, MlpOnTheGpuEndsWhereTheCpuDoes) {
  const std::vector<float> gpu =
      Train(2, 4, "adam", 2, {"--device=cuda"}, kGpuWorker);
  const std::vector<float> cpu = Train(2, 4, "adam", 2, {"--device=cpu"});
  ASSERT_EQ(gpu.size(), cpu.size());
  const double difference = MaxRelativeDifference(gpu, cpu);
  std::printf("MLP, 20 Adam steps, emulated GPU vs CPU: %.3g\n", difference);
  EXPECT_LT(difference, 1e-4);
}

// The BN-free CNN on the emulated GPU: W workers x batch B equal one worker
// x batch W*B on the same device, and both end close to the CPU device.
TEST(EmulatedGpuTrainingTest, CnnWorkersTimesBatchEqualsOneBigBatch) {
  const std::vector<std::string> cnn = {"--model=cnn", "--input_shape=16,16,1",
                                        "--max_steps=6", "--device=cuda"};
  const std::vector<float> two = Train(2, 4, "adam", 2, cnn, kGpuWorker);
  const std::vector<float> one = Train(1, 8, "adam", 1, cnn, kGpuWorker);
  ASSERT_EQ(two.size(), one.size());
  EXPECT_LE(MaxRelativeDifference(two, one), 1e-5);
  std::vector<std::string> on_cpu = cnn;
  on_cpu.back() = "--device=cpu";
  const std::vector<float> cpu = Train(2, 4, "adam", 2, on_cpu);
  const double difference = MaxRelativeDifference(two, cpu);
  std::printf("CNN, 6 Adam steps, emulated GPU vs CPU: %.3g\n", difference);
  EXPECT_LT(difference, 1e-4);
}

}  // namespace
}  // namespace lockstep
