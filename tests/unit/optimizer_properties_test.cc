// Properties every optimizer kind keeps, on random data: disjoint ranges
// update independently, ApplyMean has the bits of scaling, copying and
// applying, slots are Keras's and a checkpoint's slots resume the same
// trajectory. The hand-computed steps are in optimizer_test.cc.
#include <cstdint>
#include <iterator>
#include <limits>
#include <memory>
#include <string>
#include <vector>

#include "absl/types/span.h"
#include "common/base/random.h"
#include "common/model/model_signature.h"
#include "common/optim/optimizer.h"
#include "gtest/gtest.h"
#include "tests/unit/optimizer_test_util.h"

namespace lockstep {
namespace {

std::vector<OptimizerConfig> AllKinds() {
  OptimizerConfig nesterov = OptimizerConfig::Defaults("momentum");
  nesterov.nesterov = true;
  OptimizerConfig sgd_with_decay = OptimizerConfig::Defaults("sgd");
  sgd_with_decay.weight_decay = 0.1;
  OptimizerConfig nesterov_with_decay = nesterov;
  nesterov_with_decay.weight_decay = 0.1;
  return {OptimizerConfig::Defaults("sgd"),
          OptimizerConfig::Defaults("momentum"),
          nesterov,
          sgd_with_decay,
          nesterov_with_decay,
          OptimizerConfig::Defaults("adam"),
          OptimizerConfig::Defaults("adamw")};
}

std::vector<float> RandomNonZero(Random& random, int n) {
  std::vector<float> values(n);
  for (float& x : values) {
    // Magnitude in [0.25, 2), random sign: never zero.
    x = random.Uniform(0.25f, 2.0f) * (random.Next() & 1 ? 1.0f : -1.0f);
  }
  return values;
}

TEST(OptimizerPropertiesTest, TwoHalvesEqualTheWhole) {
  // 11 elements split 4 + 7, so vector bodies and scalar tails both run.
  constexpr int kN = 11;
  constexpr int kSplit = 4;
  for (const OptimizerConfig& config : AllKinds()) {
    SCOPED_TRACE(config.name + (config.nesterov ? " nesterov" : "") +
                 (config.weight_decay != 0 ? " decay" : ""));
    std::unique_ptr<Optimizer> whole = Make(config, kN);
    std::unique_ptr<Optimizer> halves = Make(config, kN);
    ASSERT_NE(whole, nullptr);
    ASSERT_NE(halves, nullptr);
    Random random(42);
    std::vector<float> w_whole = RandomNonZero(random, kN);
    std::vector<float> w_halves = w_whole;
    for (int step = 0; step < 3; ++step) {
      const std::vector<float> g = RandomNonZero(random, kN);
      whole->Apply(step, 0, absl::MakeSpan(w_whole), g);
      // Second half first: the order of disjoint ranges must not matter.
      halves->Apply(step, kSplit, absl::MakeSpan(w_halves).subspan(kSplit),
                    absl::MakeConstSpan(g).subspan(kSplit));
      halves->Apply(step, 0, absl::MakeSpan(w_halves).subspan(0, kSplit),
                    absl::MakeConstSpan(g).subspan(0, kSplit));
    }
    EXPECT_EQ(w_whole, w_halves);
    auto whole_slots = whole->Slots();
    auto halves_slots = halves->Slots();
    ASSERT_EQ(whole_slots.size(), halves_slots.size());
    for (size_t s = 0; s < whole_slots.size(); ++s) {
      EXPECT_EQ(whole_slots[s].first, halves_slots[s].first);
      EXPECT_EQ(std::vector<float>(whole_slots[s].second.begin(),
                                   whole_slots[s].second.end()),
                std::vector<float>(halves_slots[s].second.begin(),
                                   halves_slots[s].second.end()))
          << "slot " << whole_slots[s].first;
    }
  }
}

std::vector<std::vector<float>> SlotValues(Optimizer& optimizer) {
  std::vector<std::vector<float>> values;
  for (auto& [name, slot] : optimizer.Slots()) {
    values.emplace_back(slot.begin(), slot.end());
  }
  return values;
}

TEST(OptimizerPropertiesTest, ApplyMeanHasTheBitsOfScalingThenApply) {
  // A server's step: a sum of 3 workers' gradients, scaled by 1/3, applied
  // to a copy of the published weights. ApplyMean does it in one pass, both
  // into a new buffer and in place, and must give the very same bits.
  constexpr int kN = 19;  // Vector bodies and a scalar tail.
  const float scale = 1.0f / 3.0f;
  for (const OptimizerConfig& config : AllKinds()) {
    SCOPED_TRACE(config.name + (config.nesterov ? " nesterov" : "") +
                 (config.weight_decay != 0 ? " decay" : ""));
    std::unique_ptr<Optimizer> reference = Make(config, kN);
    std::unique_ptr<Optimizer> fresh_buffer = Make(config, kN);
    std::unique_ptr<Optimizer> in_place = Make(config, kN);
    ASSERT_NE(reference, nullptr);
    ASSERT_NE(fresh_buffer, nullptr);
    ASSERT_NE(in_place, nullptr);
    Random random(11);
    const std::vector<float> initial = RandomNonZero(random, kN);
    std::vector<float> w_reference = initial;
    std::vector<float> w_fresh = w_reference;
    std::vector<float> w_in_place = w_reference;
    for (int step = 0; step < 3; ++step) {
      const std::vector<float> sum = RandomNonZero(random, kN);
      std::vector<float> g = sum;
      for (float& x : g) x *= scale;
      reference->Apply(step, 0, absl::MakeSpan(w_reference), g);

      const std::vector<float> from = w_fresh;
      std::vector<float> to(kN, std::numeric_limits<float>::quiet_NaN());
      fresh_buffer->ApplyMean(step, 0, from, absl::MakeSpan(to), sum, scale);
      EXPECT_EQ(from, w_fresh) << "step " << step << ": `from` was written";
      w_fresh = to;

      in_place->ApplyMean(step, 0, w_in_place, absl::MakeSpan(w_in_place), sum,
                          scale);
      EXPECT_EQ(w_fresh, w_reference) << "step " << step;
      EXPECT_EQ(w_in_place, w_reference) << "step " << step;
      EXPECT_EQ(SlotValues(*fresh_buffer), SlotValues(*reference));
      EXPECT_EQ(SlotValues(*in_place), SlotValues(*reference));
    }
    EXPECT_NE(w_reference, initial) << "the weights never moved";
  }
}

TEST(OptimizerPropertiesTest, SubRangeTouchesOnlyItsSlots) {
  constexpr int kN = 10;
  constexpr int kOffset = 3;
  constexpr int kSize = 4;
  for (const OptimizerConfig& config : AllKinds()) {
    SCOPED_TRACE(config.name);
    std::unique_ptr<Optimizer> optimizer = Make(config, kN);
    ASSERT_NE(optimizer, nullptr);
    Random random(7);
    std::vector<float> w = RandomNonZero(random, kSize);
    const std::vector<float> g = RandomNonZero(random, kSize);
    optimizer->Apply(/*step=*/0, kOffset, absl::MakeSpan(w), g);
    for (auto& [name, slot] : optimizer->Slots()) {
      ASSERT_EQ(slot.size(), static_cast<size_t>(kN)) << name;
      for (int i = 0; i < kN; ++i) {
        if (i >= kOffset && i < kOffset + kSize) {
          EXPECT_NE(slot[i], 0.0f) << name << "[" << i << "]";
        } else {
          EXPECT_EQ(slot[i], 0.0f) << name << "[" << i << "]";
        }
      }
    }
  }
}

TEST(OptimizerPropertiesTest, SlotsHaveKerasNamesAndFullSize) {
  constexpr int64_t kN = 5;
  struct Case {
    std::string name;
    double momentum;
    std::vector<std::string> slots;
  };
  const Case cases[] = {
      {"sgd", 0.0, {}},
      {"sgd", 0.5, {"momentum"}},  // Keras SGD with momentum.
      {"momentum", 0.0, {}},       // No velocity to keep.
      {"momentum", 0.9, {"momentum"}},
      {"adam", 0.0, {"m", "v"}},
      {"adamw", 0.0, {"m", "v"}},
  };
  for (const Case& c : cases) {
    SCOPED_TRACE(c.name + " momentum=" + std::to_string(c.momentum));
    OptimizerConfig config = OptimizerConfig::Defaults(c.name);
    config.momentum = c.momentum;
    std::unique_ptr<Optimizer> optimizer = Make(config, kN);
    ASSERT_NE(optimizer, nullptr);
    EXPECT_EQ(optimizer->config(), config);
    std::vector<std::string> names;
    for (auto& [name, slot] : optimizer->Slots()) {
      names.push_back(name);
      EXPECT_EQ(slot.size(), static_cast<size_t>(kN)) << name;
      for (float x : slot) EXPECT_EQ(x, 0.0f) << name;
    }
    EXPECT_EQ(names, c.slots);
  }
}

TEST(OptimizerPropertiesTest, RestoredSlotsResumeTheSameTrajectory) {
  // Slots are what a checkpoint saves: copying them into a fresh optimizer
  // must continue exactly where the original left off.
  for (const OptimizerConfig& config : AllKinds()) {
    SCOPED_TRACE(config.name);
    std::unique_ptr<Optimizer> original = Make(config, 2);
    std::unique_ptr<Optimizer> restored = Make(config, 2);
    ASSERT_NE(original, nullptr);
    ASSERT_NE(restored, nullptr);
    std::vector<float> w(std::begin(kW), std::end(kW));
    original->Apply(0, 0, absl::MakeSpan(w), kG0);
    auto from = original->Slots();
    auto to = restored->Slots();
    ASSERT_EQ(from.size(), to.size());
    for (size_t s = 0; s < from.size(); ++s) {
      std::copy(from[s].second.begin(), from[s].second.end(),
                to[s].second.begin());
    }
    std::vector<float> w_restored = w;
    original->Apply(1, 0, absl::MakeSpan(w), kG1);
    restored->Apply(1, 0, absl::MakeSpan(w_restored), kG1);
    EXPECT_EQ(w, w_restored);
  }
}

}  // namespace
}  // namespace lockstep
