#include "worker/exchange/rejoiner.h"

#include <vector>

#include "absl/time/clock.h"

#include "gmock/gmock.h"
#include "gtest/gtest.h"

namespace lockstep {
namespace {

using ::testing::HasSubstr;

TEST(RejoinerTest, RetriesRetryableFailuresUntilARegistrationWorks) {
  Rejoiner rejoiner("test", 1, 0, absl::Seconds(30), "--rejoin_timeout_s");
  std::vector<absl::StatusOr<int64_t>> answers = {
      absl::UnavailableError("away"), absl::DeadlineExceededError("slow"), 7};
  size_t calls = 0;
  absl::StatusOr<int64_t> version =
      rejoiner.Rejoin(absl::AbortedError("evicted"), [&](absl::Duration) {
        return answers[calls++];
      });
  ASSERT_TRUE(version.ok()) << version.status();
  EXPECT_EQ(*version, 7);
  EXPECT_EQ(calls, 3u);
  EXPECT_EQ(rejoiner.rejoins(), 1);
}

TEST(RejoinerTest, StopsAtAPermanentFailure) {
  Rejoiner rejoiner("test", 1, 0, absl::Seconds(30), "--rejoin_timeout_s");
  int calls = 0;
  absl::StatusOr<int64_t> version =
      rejoiner.Rejoin(absl::AbortedError("evicted"), [&](absl::Duration) {
        ++calls;
        return absl::StatusOr<int64_t>(
            absl::FailedPreconditionError("another model"));
      });
  EXPECT_EQ(version.status().code(), absl::StatusCode::kFailedPrecondition);
  EXPECT_EQ(calls, 1);
}

TEST(RejoinerTest, TheDeadlineCountsFromTheLastStepThatSucceeded) {
  Rejoiner rejoiner("test", 1, 0, absl::Milliseconds(200), "the_timeout");
  const absl::Status cause = absl::UnavailableError("gone");
  EXPECT_TRUE(rejoiner.CheckDeadline(cause).ok());
  // Registering keeps failing: Rejoin gives up by the deadline, naming it.
  absl::StatusOr<int64_t> version = rejoiner.Rejoin(cause, [](absl::Duration) {
    return absl::StatusOr<int64_t>(absl::UnavailableError("still gone"));
  });
  EXPECT_EQ(version.status().code(), absl::StatusCode::kUnavailable);
  EXPECT_THAT(version.status().message(), HasSubstr("gave up registering"));
  // It gives up when the next backoff would pass the deadline; the
  // deadline itself comes a little later.
  absl::Status late = rejoiner.CheckDeadline(cause);
  for (const absl::Time bound = absl::Now() + absl::Seconds(10);
       late.ok() && absl::Now() < bound; late = rejoiner.CheckDeadline(cause)) {
    absl::SleepFor(absl::Milliseconds(5));
  }
  EXPECT_EQ(late.code(), absl::StatusCode::kUnavailable);
  EXPECT_THAT(late.message(), HasSubstr("(the_timeout)"));
  rejoiner.StepSucceeded();
  EXPECT_TRUE(rejoiner.CheckDeadline(cause).ok());
}

}  // namespace
}  // namespace lockstep
