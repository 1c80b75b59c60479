// The push window the worker picks by default
// (worker/exchange/ps/push_window.h).
#include "worker/exchange/ps/push_window.h"

#include <cstdint>

#include "gmock/gmock.h"
#include "gtest/gtest.h"

namespace lockstep {
namespace {

using ::testing::HasSubstr;

constexpr int64_t kMiB = int64_t{1} << 20;

// All workers' pushes at a shard stay within 32 MiB, 1 to 4 per worker.
TEST(AutoPushWindowTest, KeepsAShardsPushesWithin32MiB) {
  // 4 MiB fp32 chunks (the default).
  EXPECT_EQ(AutoPushWindow(1, 4 * kMiB), 4);
  EXPECT_EQ(AutoPushWindow(2, 4 * kMiB), 4);
  EXPECT_EQ(AutoPushWindow(3, 4 * kMiB), 2);
  EXPECT_EQ(AutoPushWindow(4, 4 * kMiB), 2);
  EXPECT_EQ(AutoPushWindow(5, 4 * kMiB), 1);
  EXPECT_EQ(AutoPushWindow(8, 4 * kMiB), 1);
  EXPECT_EQ(AutoPushWindow(64, 4 * kMiB), 1) << "never below 1";
  // The same chunks in bf16 are 2 MiB on the wire.
  EXPECT_EQ(AutoPushWindow(8, 2 * kMiB), 2);
  // Small chunks: never more than 4.
  EXPECT_EQ(AutoPushWindow(8, 64), 4);
  // Degenerate inputs still give a usable window.
  EXPECT_EQ(AutoPushWindow(0, 4 * kMiB), 4);
  EXPECT_EQ(AutoPushWindow(2, 0), 4);
}

TEST(ResolvePushWindowTest, AnExplicitWindowOrAutosChoiceInWireBytes) {
  EXPECT_EQ(ResolvePushWindow(3, 8, 1 << 20, WireDType::kFloat32), 3);
  EXPECT_EQ(ResolvePushWindow(0, 8, 1 << 20, WireDType::kFloat32), 0);
  // 1M values: 4 MiB in fp32, 2 MiB in bf16.
  EXPECT_EQ(ResolvePushWindow(kAutoPushWindow, 8, 1 << 20, WireDType::kFloat32),
            1);
  EXPECT_EQ(
      ResolvePushWindow(kAutoPushWindow, 8, 1 << 20, WireDType::kBfloat16), 2);
}

TEST(ParsePushWindowTest, AutoOrACount) {
  EXPECT_EQ(*ParsePushWindow("auto"), kAutoPushWindow);
  EXPECT_EQ(*ParsePushWindow("0"), 0);
  EXPECT_EQ(*ParsePushWindow("3"), 3);
  for (const char* bad : {"-1", "", "four", "2x", "Auto"}) {
    absl::StatusOr<int> parsed = ParsePushWindow(bad);
    EXPECT_EQ(parsed.status().code(), absl::StatusCode::kInvalidArgument)
        << bad;
    EXPECT_THAT(parsed.status().message(),
                HasSubstr("push window must be auto or a count >= 0"));
  }
}

}  // namespace
}  // namespace lockstep
