// Every kernel variant this CPU runs (common/kernels/kernels.h) against the generic
// one, bit for bit, and the generic fp16 widening against IEEE's formula
// for all 65,536 encodings.
#include "common/kernels/kernels.h"

#include <cmath>
#include <cstdint>
#include <cstdlib>
#include <cstring>
#include <random>
#include <string>
#include <vector>

#include "absl/base/casts.h"
#include "gtest/gtest.h"

namespace lockstep {
namespace kernels {
namespace {

// Odd length: the vector loops' tails run too.
constexpr size_t kN = 1000 + 37;

std::vector<float> Random(uint32_t seed, float scale) {
  std::mt19937 rng(seed);
  std::normal_distribution<float> normal(0.0f, scale);
  std::vector<float> v(kN);
  for (float& x : v) x = normal(rng);
  v[3] = 0.0f;
  v[4] = -0.0f;
  v[5] = 1e-40f;  // Subnormal.
  return v;
}

// The bytes of `values` from byte 1 of a buffer: the kernels read
// unaligned payloads.
std::string Unaligned(const void* data, size_t bytes) {
  std::string s(bytes + 1, '\0');
  std::memcpy(s.data() + 1, data, bytes);
  return s;
}

void ExpectSameBits(const std::vector<float>& want,
                    const std::vector<float>& got, const std::string& what) {
  ASSERT_EQ(want.size(), got.size()) << what;
  for (size_t i = 0; i < want.size(); ++i) {
    ASSERT_EQ(absl::bit_cast<uint32_t>(want[i]),
              absl::bit_cast<uint32_t>(got[i]))
        << what << " element " << i << ": " << want[i] << " vs " << got[i];
  }
}

const Table& Generic() { return *Runnable().front(); }

TEST(KernelsTest, GenericComesFirstAndTheActiveOneIsRunnable) {
  const std::vector<const Table*> runnable = Runnable();
  ASSERT_FALSE(runnable.empty());
  EXPECT_STREQ(runnable.front()->name, "generic");
  bool found = false;
  for (const Table* t : runnable) found = found || t == &Active();
  EXPECT_TRUE(found) << Active().name;
  // Named for the log of a run that skipped a variant.
  std::string names;
  for (const Table* t : runnable) names += std::string(" ") + t->name;
  RecordProperty("variants", names);
}

// LOCKSTEP_KERNELS picks the variant; unset, the widest this CPU runs is
// used. (ctest runs this file both ways: GenericKernels.* sets it.)
TEST(KernelsTest, TheEnvironmentPicksTheVariant) {
  const char* wanted = std::getenv("LOCKSTEP_KERNELS");
  if (wanted != nullptr && *wanted != '\0') {
    EXPECT_STREQ(Active().name, wanted);
  } else {
    EXPECT_EQ(&Active(), Runnable().back());
  }
}

// The variants the other tests could not compare on this CPU are a skip,
// not a pass: they are checked where the CPU has them (the GPU machine's
// device check runs this suite).
TEST(KernelsTest, EveryBuiltVariantRunsHere) {
  std::string missing;
  const std::vector<const Table*> runnable = Runnable();
  for (const Table* t : Built()) {
    bool found = false;
    for (const Table* r : runnable) found = found || r == t;
    if (!found) missing += std::string(" ") + t->name;
  }
  if (!missing.empty()) {
    GTEST_SKIP() << "this CPU cannot run:" << missing
                 << "; those variants are not compared here";
  }
}

// IEEE binary16 by its definition, in double.
float HalfByFormula(uint16_t h) {
  const int sign = h >> 15, exponent = (h >> 10) & 0x1f, mantissa = h & 0x3ff;
  double value;
  if (exponent == 0x1f) {
    if (mantissa != 0) {
      // NaN: the payload is kept in the top mantissa bits.
      uint32_t bits = (static_cast<uint32_t>(sign) << 31) | 0x7f800000u |
                      (static_cast<uint32_t>(mantissa) << 13);
      float f;
      std::memcpy(&f, &bits, sizeof(f));
      return f;
    }
    value = INFINITY;
  } else if (exponent == 0) {
    value = std::ldexp(mantissa, -24);
  } else {
    value = std::ldexp(1024 + mantissa, exponent - 25);
  }
  return static_cast<float>(sign ? -value : value);
}

TEST(KernelsTest, Float16WideningIsExactForEveryEncoding) {
  std::vector<uint16_t> all(65536);
  for (uint32_t h = 0; h < 65536; ++h) all[h] = static_cast<uint16_t>(h);
  for (const Table* t : Runnable()) {
    std::vector<float> out(all.size());
    t->decode[kF16](reinterpret_cast<const char*>(all.data()), all.size(),
                    out.data());
    for (uint32_t h = 0; h < 65536; ++h) {
      ASSERT_EQ(
          absl::bit_cast<uint32_t>(out[h]),
          absl::bit_cast<uint32_t>(HalfByFormula(static_cast<uint16_t>(h))))
          << t->name << " half 0x" << std::hex << h;
    }
  }
}

TEST(KernelsTest, SumsDecodesAndChecksMatchGeneric) {
  const std::vector<float> values = Random(1, 3.0f);
  std::vector<uint16_t> halves(kN);
  for (size_t i = 0; i < kN; ++i) {
    const uint32_t bits = absl::bit_cast<uint32_t>(values[i]);
    halves[i] = static_cast<uint16_t>(bits >> 16);  // bf16 bits.
  }
  std::vector<uint16_t> fp16(kN);
  for (size_t i = 0; i < kN; ++i) fp16[i] = static_cast<uint16_t>(i * 61);
  for (uint16_t& h : fp16) {
    if ((h & 0x7c00) == 0x7c00) h &= 0x3fff;  // Finite only.
  }
  const std::string payload[3] = {Unaligned(values.data(), kN * 4),
                                  Unaligned(halves.data(), kN * 2),
                                  Unaligned(fp16.data(), kN * 2)};
  const std::vector<float> start = Random(2, 1.0f);
  for (const Table* t : Runnable()) {
    for (int d = 0; d < 3; ++d) {
      const char* p = payload[d].data() + 1;
      std::vector<float> want = start, got = start;
      Generic().accumulate[d](p, kN, want.data());
      t->accumulate[d](p, kN, got.data());
      ExpectSameBits(want, got, std::string(t->name) + " accumulate");
      Generic().decode[d](p, kN, want.data());
      t->decode[d](p, kN, got.data());
      ExpectSameBits(want, got, std::string(t->name) + " decode");
      EXPECT_FALSE(t->any_nonfinite[d](p, kN)) << t->name << " dtype " << d;
    }
    std::vector<float> want(kN), got(kN);
    Generic().scale(kN, 0.25f, start.data(), want.data());
    t->scale(kN, 0.25f, start.data(), got.data());
    ExpectSameBits(want, got, std::string(t->name) + " scale");
  }
}

TEST(KernelsTest, EveryVariantFindsANaNOrInfAnywhere) {
  for (const Table* t : Runnable()) {
    for (size_t at : {size_t{0}, size_t{7}, kN / 2, kN - 1}) {
      std::vector<float> f(kN, 1.0f);
      f[at] = std::nanf("");
      EXPECT_TRUE(
          t->any_nonfinite[kF32](reinterpret_cast<const char*>(f.data()), kN))
          << t->name << " at " << at;
      f[at] = -INFINITY;
      EXPECT_TRUE(
          t->any_nonfinite[kF32](reinterpret_cast<const char*>(f.data()), kN));
      std::vector<uint16_t> bf(kN, 0x3f80), hf(kN, 0x3c00);
      bf[at] = 0x7f80;  // +Inf.
      hf[at] = 0xfe00;  // NaN.
      EXPECT_TRUE(t->any_nonfinite[kBf16](
          reinterpret_cast<const char*>(bf.data()), kN));
      EXPECT_TRUE(
          t->any_nonfinite[kF16](reinterpret_cast<const char*>(hf.data()), kN));
      // The largest finite values are finite.
      bf[at] = 0x7f7f;
      hf[at] = 0x7bff;
      EXPECT_FALSE(t->any_nonfinite[kBf16](
          reinterpret_cast<const char*>(bf.data()), kN));
      EXPECT_FALSE(
          t->any_nonfinite[kF16](reinterpret_cast<const char*>(hf.data()), kN));
    }
  }
}

// One optimizer loop's variant: in place or not, with or without weight
// decay, named for the failure messages.
struct LoopVariant {
  const Table* table;
  int in_place, decay;
  float wd;
  std::string what;
};

// SGD over three steps, on generic's loop and on v's.
void ExpectSgdMatches(const LoopVariant& v, const std::vector<float>& sum,
                      const std::vector<float>& w0) {
  const Table* t = v.table;
  const int decay = v.decay;
  const float wd = v.wd;
  std::vector<float> want = w0, got = w0, out_want(kN), out_got(kN);
  for (int step = 0; step < 3; ++step) {
    if (v.in_place) {
      Generic().sgd[1][decay](kN, 0.1f, wd, 0.5f, sum.data(), nullptr,
                              want.data());
      t->sgd[1][decay](kN, 0.1f, wd, 0.5f, sum.data(), nullptr, got.data());
    } else {
      Generic().sgd[0][decay](kN, 0.1f, wd, 0.5f, sum.data(), want.data(),
                              out_want.data());
      t->sgd[0][decay](kN, 0.1f, wd, 0.5f, sum.data(), got.data(),
                       out_got.data());
      want = out_want;
      got = out_got;
    }
  }
  ExpectSameBits(want, got, v.what + " sgd");
}

// Momentum, plain and Nesterov, over three steps each.
void ExpectMomentumMatches(const LoopVariant& v, const std::vector<float>& sum,
                           const std::vector<float>& w0) {
  const Table* t = v.table;
  const int in_place = v.in_place, decay = v.decay;
  const float wd = v.wd;
  std::vector<float> out_want(kN), out_got(kN);
  for (int nesterov = 0; nesterov < 2; ++nesterov) {
    std::vector<float> vw(kN, 0.0f), vg(kN, 0.0f);
    std::vector<float> want = w0, got = w0;
    for (int step = 0; step < 3; ++step) {
      const float* from_w = in_place ? nullptr : want.data();
      const float* from_g = in_place ? nullptr : got.data();
      float* to_w = in_place ? want.data() : out_want.data();
      float* to_g = in_place ? got.data() : out_got.data();
      Generic().momentum[in_place][decay][nesterov](
          kN, 0.1f, wd, 0.9f, 0.5f, sum.data(), vw.data(), from_w, to_w);
      t->momentum[in_place][decay][nesterov](
          kN, 0.1f, wd, 0.9f, 0.5f, sum.data(), vg.data(), from_g, to_g);
      if (!in_place) {
        want = out_want;
        got = out_got;
      }
    }
    ExpectSameBits(vw, vg, v.what + " momentum velocity");
    ExpectSameBits(want, got, v.what + " momentum");
  }
}

// Adam over three steps: alpha changes per step as the optimizer computes
// it.
void ExpectAdamMatches(const LoopVariant& v, AdamFactors f,
                       const std::vector<float>& sum,
                       const std::vector<float>& w0) {
  const Table* t = v.table;
  const int in_place = v.in_place, decay = v.decay;
  std::vector<float> out_want(kN), out_got(kN);
  std::vector<float> mw(kN, 0.0f), mg(kN, 0.0f), vw(kN, 0.0f), vg(kN, 0.0f);
  std::vector<float> want = w0, got = w0;
  f.weight_decay = v.wd;
  for (int step = 0; step < 3; ++step) {
    f.alpha =
        static_cast<float>(0.01 * std::sqrt(1 - std::pow(0.999, step + 1)) /
                           (1 - std::pow(0.9, step + 1)));
    const float* from_w = in_place ? nullptr : want.data();
    const float* from_g = in_place ? nullptr : got.data();
    float* to_w = in_place ? want.data() : out_want.data();
    float* to_g = in_place ? got.data() : out_got.data();
    Generic().adam[in_place][decay](kN, f, 0.5f, sum.data(), mw.data(),
                                    vw.data(), from_w, to_w);
    t->adam[in_place][decay](kN, f, 0.5f, sum.data(), mg.data(), vg.data(),
                             from_g, to_g);
    if (!in_place) {
      want = out_want;
      got = out_got;
    }
  }
  ExpectSameBits(mw, mg, v.what + " adam m");
  ExpectSameBits(vw, vg, v.what + " adam v");
  ExpectSameBits(want, got, v.what + " adam");
}

// Each optimizer loop, in place and not, with and without weight decay,
// over several steps: slots and weights bit-identical to generic's.
TEST(KernelsTest, OptimizerLoopsMatchGeneric) {
  const std::vector<float> sum = Random(3, 0.5f);
  const std::vector<float> w0 = Random(4, 1.0f);
  const AdamFactors f{0.9f, 0.999f, 0.1f, 0.001f, 0.0f, 1e-7f, 0.0f, 0.01f};
  for (const Table* t : Runnable()) {
    for (int in_place = 0; in_place < 2; ++in_place) {
      for (int decay = 0; decay < 2; ++decay) {
        const LoopVariant v{t, in_place, decay, decay ? 0.004f : 0.0f,
                            std::string(t->name) + " in_place " +
                                std::to_string(in_place) + " decay " +
                                std::to_string(decay)};
        ExpectSgdMatches(v, sum, w0);
        ExpectMomentumMatches(v, sum, w0);
        ExpectAdamMatches(v, f, sum, w0);
      }
    }
  }
}

}  // namespace
}  // namespace kernels
}  // namespace lockstep
