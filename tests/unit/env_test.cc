#include "common/env.h"

#include <cstdio>
#include <fstream>
#include <string>

#include "absl/time/time.h"
#include "gtest/gtest.h"

namespace lockstep {
namespace {

TEST(FakeEnvTest, StandsStillUntilMoved) {
  FakeEnv env(absl::FromUnixSeconds(100));
  EXPECT_EQ(env.Now(), absl::FromUnixSeconds(100));
  EXPECT_EQ(env.Now(), absl::FromUnixSeconds(100));
  env.Advance(absl::Milliseconds(250));
  EXPECT_EQ(env.Now(), absl::FromUnixSeconds(100) + absl::Milliseconds(250));
  EXPECT_EQ(env.slept(), absl::ZeroDuration());
}

TEST(FakeEnvTest, SleepMovesTheClockAndIsCounted) {
  FakeEnv env(absl::FromUnixSeconds(0));
  env.SleepFor(absl::Seconds(3));
  env.SleepFor(absl::Seconds(-1));  // Ignored, as a real sleep would be.
  env.SleepFor(absl::Milliseconds(500));
  EXPECT_EQ(env.Now(), absl::FromUnixSeconds(0) + absl::Milliseconds(3500));
  EXPECT_EQ(env.slept(), absl::Milliseconds(3500));
}

TEST(EnvTest, DefaultFollowsTheRealClock) {
  Env* env = Env::Default();
  ASSERT_EQ(env, Env::Default());
  const absl::Time before = absl::Now();
  env->SleepFor(absl::Milliseconds(20));
  const absl::Time now = env->Now();
  EXPECT_GE(now - before, absl::Milliseconds(20));
  EXPECT_LT(now - before, absl::Seconds(30));
}

TEST(EnvTest, RenameMovesAFileAndNamesBothOnFailure) {
  const std::string dir = ::testing::TempDir();
  const std::string from = dir + "/env_test_from";
  const std::string to = dir + "/env_test_to";
  { std::ofstream(from) << "payload"; }
  ASSERT_TRUE(Env::Default()->RenameFile(from, to).ok());
  std::ifstream in(to);
  std::string text;
  in >> text;
  EXPECT_EQ(text, "payload");
  const absl::Status missing = Env::Default()->RenameFile(from, to);
  EXPECT_EQ(missing.code(), absl::StatusCode::kInternal);
  EXPECT_NE(missing.message().find(from), absl::string_view::npos);
  EXPECT_NE(missing.message().find(to), absl::string_view::npos);
  std::remove(to.c_str());
}

}  // namespace
}  // namespace lockstep
