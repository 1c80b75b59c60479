// InnerStateStore (worker/exchange/inner_state_store.h): a LocalSGD or
// DiLoCo worker's inner optimizer state, saved by version and read back.
#include "worker/exchange/inner_state_store.h"

#include <memory>
#include <string>
#include <vector>

#include "common/base/env.h"
#include "gmock/gmock.h"
#include "gtest/gtest.h"

namespace lockstep {
namespace {

std::unique_ptr<Optimizer> Adam(int64_t n) {
  return *Optimizer::Create(OptimizerConfig::Defaults("adam"), n);
}

std::vector<float> SlotValues(Optimizer& o) {
  std::vector<float> all;
  for (const auto& [name, values] : o.Slots()) {
    all.insert(all.end(), values.begin(), values.end());
  }
  return all;
}

// Adam's moments after one step on a known gradient: m = (1 - b1) g,
// v = (1 - b2) g^2.
TEST(InnerStateStoreTest, SavesByVersionKeepsTheNewestAndReadsBack) {
  const std::string dir = ::testing::TempDir() + "/inner-store/a";
  InnerStateStore store(dir, 2);
  std::unique_ptr<Optimizer> saved = Adam(3);
  std::vector<float> w = {1, 2, 3};
  saved->Apply(0, 0, absl::MakeSpan(w), std::vector<float>{1, -2, 4});
  const std::vector<float> state = SlotValues(*saved);
  ASSERT_EQ(state.size(), 6u);
  EXPECT_FLOAT_EQ(state[1], 0.1f * -2);  // m of the second parameter.
  for (int64_t v = 1; v <= 5; ++v) ASSERT_TRUE(store.Save(v, *saved).ok());
  EXPECT_THAT(*store.Versions(), ::testing::ElementsAre(3, 4, 5));

  std::unique_ptr<Optimizer> loaded = Adam(3);
  absl::StatusOr<bool> got = store.Load(5, *loaded);
  ASSERT_TRUE(got.ok()) << got.status();
  EXPECT_TRUE(*got);
  EXPECT_EQ(SlotValues(*loaded), state);
  // None for a version not kept, nor for another rank.
  EXPECT_FALSE(*store.Load(2, *loaded));
  EXPECT_FALSE(*InnerStateStore(dir, 1).Load(5, *loaded));
  // Another model's sizes: refused, naming the file and the flag.
  std::unique_ptr<Optimizer> other = Adam(4);
  absl::StatusOr<bool> refused = store.Load(5, *other);
  EXPECT_EQ(refused.status().code(), absl::StatusCode::kFailedPrecondition);
  EXPECT_THAT(refused.status().message(),
              ::testing::AllOf(::testing::HasSubstr(store.PathOf(5)),
                               ::testing::HasSubstr("--inner_state_dir")));
  EXPECT_EQ(SlotValues(*other), std::vector<float>(8, 0.0f)) << "untouched";
}

// Files of versions above the one saved are another history's (an earlier
// run in the folder, or the servers stepped back): a save removes them, as
// does joining below them, so that none is taken later or crowds out the
// new ones.
TEST(InnerStateStoreTest, AnotherHistorysFilesGo) {
  const std::string dir = ::testing::TempDir() + "/inner-store/history";
  InnerStateStore store(dir, 0);
  std::unique_ptr<Optimizer> adam = Adam(2);
  for (int64_t v : {98, 99, 100}) ASSERT_TRUE(store.Save(v, *adam).ok());
  store.ForgetAfter(99);
  EXPECT_THAT(*store.Versions(), ::testing::ElementsAre(98, 99));
  ASSERT_TRUE(store.Save(4, *adam).ok());
  EXPECT_THAT(*store.Versions(), ::testing::ElementsAre(4));
  ASSERT_TRUE(store.Save(5, *adam).ok());
  EXPECT_THAT(*store.Versions(), ::testing::ElementsAre(4, 5));
}

// SGD has no state: nothing is written, nothing read.
TEST(InnerStateStoreTest, AnOptimizerWithoutStateSavesNothing) {
  const std::string dir = ::testing::TempDir() + "/inner-store/sgd";
  InnerStateStore store(dir, 0);
  std::unique_ptr<Optimizer> sgd =
      *Optimizer::Create(OptimizerConfig::Defaults("sgd"), 3);
  ASSERT_TRUE(store.Save(1, *sgd).ok());
  EXPECT_TRUE(store.Versions()->empty());
  EXPECT_FALSE(*store.Load(1, *sgd));
}

}  // namespace
}  // namespace lockstep
