// Shared by the optimizer tests: exact inputs and a checked Create.
#ifndef LOCKSTEP_TESTS_UNIT_OPTIMIZER_TEST_UTIL_H_
#define LOCKSTEP_TESTS_UNIT_OPTIMIZER_TEST_UTIL_H_

#include <cstdint>
#include <memory>
#include <utility>

#include "absl/status/statusor.h"
#include "common/model/model_signature.h"
#include "common/optim/optimizer.h"
#include "gtest/gtest.h"

namespace lockstep {

// Inputs are multiples of 1/64 so that they are exact in fp32 and the
// hand-computed expectations start from the very same numbers.
inline constexpr float kW[] = {0.359375f, -1.421875f};
inline constexpr float kG0[] = {0.8125f, -0.265625f};
inline constexpr float kG1[] = {0.4375f, -0.640625f};
inline constexpr float kG2[] = {1.15625f, 0.09375f};

inline std::unique_ptr<Optimizer> Make(const OptimizerConfig& config,
                                       int64_t num_parameters) {
  absl::StatusOr<std::unique_ptr<Optimizer>> optimizer =
      Optimizer::Create(config, num_parameters);
  if (!optimizer.ok()) {
    ADD_FAILURE() << "Create failed: " << optimizer.status();
    return nullptr;
  }
  return *std::move(optimizer);
}

}  // namespace lockstep

#endif  // LOCKSTEP_TESTS_UNIT_OPTIMIZER_TEST_UTIL_H_
