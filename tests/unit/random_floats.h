// Seeded random operands for the device, layer and kernel tests: the one
// definition of RandomFloats, so that tests that check one computation
// against another (a CUDA kernel against the CPU device, a layer against
// its reference) draw the same operands from the same seed.
#ifndef LOCKSTEP_TESTS_UNIT_RANDOM_FLOATS_H_
#define LOCKSTEP_TESTS_UNIT_RANDOM_FLOATS_H_

#include <cstddef>
#include <cstdint>
#include <vector>

#include "common/base/random.h"

namespace lockstep {

// `n` values uniform in [lo, hi), from Random(seed).
inline std::vector<float> RandomFloats(size_t n, uint64_t seed,
                                       float lo = -1.0f, float hi = 1.0f) {
  Random random(seed);
  std::vector<float> v(n);
  for (float& x : v) x = random.Uniform(lo, hi);
  return v;
}

}  // namespace lockstep

#endif  // LOCKSTEP_TESTS_UNIT_RANDOM_FLOATS_H_
