// A small deterministic random generator (SplitMix64). Unlike the std
// distributions, its outputs are the same bits on every platform and
// standard library, which the equivalence tests and the shared data order
// rely on. Not thread-safe; one per thread.
#ifndef LOCKSTEP_COMMON_BASE_RANDOM_H_
#define LOCKSTEP_COMMON_BASE_RANDOM_H_

#include <cstdint>

namespace lockstep {

class Random final {
 public:
  explicit Random(uint64_t seed) : state_(seed) {}

  uint64_t Next() {
    uint64_t z = (state_ += 0x9e3779b97f4a7c15ull);
    z = (z ^ (z >> 30)) * 0xbf58476d1ce4e5b9ull;
    z = (z ^ (z >> 27)) * 0x94d049bb133111ebull;
    return z ^ (z >> 31);
  }

  // Uniform in [0, 1) with 24 random bits (exact in float).
  float UniformFloat() {
    return static_cast<float>(Next() >> 40) * (1.0f / 16777216.0f);
  }

  // Uniform in [lo, hi).
  float Uniform(float lo, float hi) { return lo + (hi - lo) * UniformFloat(); }

  // Uniform integer in [0, n), n > 0, without modulo bias (rejection).
  uint64_t UniformInt(uint64_t n) {
    const uint64_t limit = UINT64_MAX - UINT64_MAX % n;
    uint64_t x;
    do {
      x = Next();
    } while (x >= limit);
    return x % n;
  }

  // A seed for a sub-stream, e.g. Derive(epoch): independent of call order.
  static uint64_t Derive(uint64_t seed, uint64_t stream) {
    Random r(seed ^ (stream * 0xd1b54a32d192ed03ull + 0x632be59bd9b4e019ull));
    return r.Next();
  }

 private:
  uint64_t state_;
};

}  // namespace lockstep

#endif  // LOCKSTEP_COMMON_BASE_RANDOM_H_
