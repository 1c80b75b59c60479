// Whether a CUDA test may skip itself for want of a GPU.
//
// Everywhere else the CUDA tests skip when no GPU is visible (CI has none).
// On the GPU machine, tests/gpu/device_check.sh --run sets
// LOCKSTEP_REQUIRE_GPU=1 when nvidia-smi lists a GPU: a CUDA test that still
// cannot get one (a driver too old for the CUDA runtime, say) then fails
// with the reason instead of skipping, so the check cannot pass without
// having tested the GPU.
#ifndef LOCKSTEP_TESTS_UNIT_GPU_REQUIRED_H_
#define LOCKSTEP_TESTS_UNIT_GPU_REQUIRED_H_

#include <cstdlib>
#include <cstring>

namespace lockstep {

inline bool GpuRequired() {
  const char* value = std::getenv("LOCKSTEP_REQUIRE_GPU");
  return value != nullptr && std::strcmp(value, "1") == 0;
}

}  // namespace lockstep

// In a test or SetUp (of a file that includes gtest): skips (or, under LOCKSTEP_REQUIRE_GPU=1, fails) with
// `why` (anything gtest can print, e.g. the device's absl::Status).
#define LOCKSTEP_SKIP_WITHOUT_GPU(why)                                   \
  do {                                                                   \
    if (::lockstep::GpuRequired()) {                                     \
      FAIL() << "LOCKSTEP_REQUIRE_GPU=1 but no CUDA device: " << (why);  \
    }                                                                    \
    GTEST_SKIP() << (why);                                               \
  } while (0)

#endif  // LOCKSTEP_TESTS_UNIT_GPU_REQUIRED_H_
