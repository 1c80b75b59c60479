#include "worker/exchange/rejoiner.h"

#include <algorithm>
#include <atomic>
#include <vector>

#include "absl/time/clock.h"
#include "common/base/env.h"
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

// On a fake clock: between attempts it sleeps half to all of a backoff that
// starts at 100 ms and doubles up to 5 s, and it gives up when the next
// backoff would pass the deadline; the deadline counts from the last step
// that succeeded.
TEST(RejoinerTest, BacksOffDoublingWithJitterUntilTheDeadlineOnAFakeClock) {
  FakeEnv env;
  const absl::Time start = env.Now();
  Rejoiner rejoiner("test", 1, 0, absl::Seconds(20), "the_timeout", &env);
  std::vector<absl::Time> attempts;
  std::vector<absl::Duration> timeouts;
  absl::StatusOr<int64_t> version = rejoiner.Rejoin(
      absl::UnavailableError("gone"), [&](absl::Duration timeout) {
        attempts.push_back(env.Now());
        timeouts.push_back(timeout);
        return absl::StatusOr<int64_t>(absl::UnavailableError("still gone"));
      });
  EXPECT_EQ(version.status().code(), absl::StatusCode::kUnavailable);
  EXPECT_THAT(version.status().message(),
              HasSubstr("gave up registering again after 20s"));
  std::vector<absl::Duration> backoffs = {absl::Milliseconds(100)};
  while (backoffs.size() < 20) {
    backoffs.push_back(std::min(backoffs.back() * 2, absl::Seconds(5)));
  }
  ASSERT_GE(attempts.size(), 2u);
  ASSERT_LT(attempts.size(), backoffs.size());
  EXPECT_EQ(attempts[0], start);  // The first attempt does not wait.
  EXPECT_EQ(timeouts[0], absl::Seconds(20));
  for (size_t i = 1; i < attempts.size(); ++i) {
    const absl::Duration gap = attempts[i] - attempts[i - 1];
    EXPECT_GE(gap, backoffs[i - 1] / 2) << "attempt " << i;
    EXPECT_LE(gap, backoffs[i - 1]) << "attempt " << i;
    // Each attempt may wait for what is left of the deadline.
    EXPECT_EQ(timeouts[i], std::max(start + absl::Seconds(20) - attempts[i],
                                    absl::Milliseconds(100)));
  }
  // It stopped because the next backoff would have passed the deadline.
  EXPECT_GE(attempts.back() + backoffs[attempts.size() - 1],
            start + absl::Seconds(20));
  EXPECT_EQ(env.slept(), attempts.back() - start);
  const absl::Status cause = absl::UnavailableError("gone");
  env.Advance(start + absl::Seconds(20) - env.Now() - absl::Nanoseconds(1));
  EXPECT_TRUE(rejoiner.CheckDeadline(cause).ok());
  env.Advance(absl::Nanoseconds(1));
  EXPECT_THAT(rejoiner.CheckDeadline(cause).message(),
              HasSubstr("no step succeeded in 20s (the_timeout)"));
  rejoiner.StepSucceeded();
  EXPECT_TRUE(rejoiner.CheckDeadline(cause).ok());
}

// A stop signal that comes while it registers again ends the backoff and
// the rejoin at once: CANCELLED, with no further attempt and no sleep.
TEST(RejoinerTest, AStopEndsTheBackoffAndTheRejoin) {
  FakeEnv env;
  Rejoiner rejoiner("test", 1, 0, absl::Seconds(20), "the_timeout", &env);
  std::atomic<bool> stop{false};
  rejoiner.set_stop(&stop);
  int calls = 0;
  absl::StatusOr<int64_t> version =
      rejoiner.Rejoin(absl::UnavailableError("gone"), [&](absl::Duration) {
        ++calls;
        stop = true;
        return absl::StatusOr<int64_t>(absl::UnavailableError("still gone"));
      });
  EXPECT_EQ(version.status().code(), absl::StatusCode::kCancelled);
  EXPECT_THAT(version.status().message(), HasSubstr("a stop signal"));
  EXPECT_EQ(calls, 1);
  EXPECT_EQ(env.slept(), absl::ZeroDuration());
}

// Progressed (a round's local steps went on since the servers last
// answered) moves the deadline by that time only: time in failed pushes
// and rejoins still adds up (before, it restarted the deadline, and a
// round whose push always failed never gave up), and the backoff stays.
TEST(RejoinerTest, ProgressMovesTheDeadlineByTheLocalTimeAndKeepsTheBackoff) {
  FakeEnv env;
  const absl::Time start = env.Now();
  Rejoiner rejoiner("test", 1, 0, absl::Seconds(20), "the_timeout", &env);
  const absl::Status cause = absl::AbortedError("given up");
  auto works = [](absl::Duration) { return absl::StatusOr<int64_t>(3); };
  env.Advance(absl::Seconds(30));  // Local steps.
  EXPECT_FALSE(rejoiner.CheckDeadline(cause).ok());
  rejoiner.Progressed();
  env.Advance(absl::Seconds(15));  // A push that fails.
  EXPECT_TRUE(rejoiner.CheckDeadline(cause).ok());
  ASSERT_TRUE(rejoiner.Rejoin(cause, works).ok());
  EXPECT_EQ(env.slept(), absl::ZeroDuration());  // The first does not wait.
  env.Advance(absl::Seconds(100));               // The round again.
  rejoiner.Progressed();
  // 15 s of the 20 are spent: the deadline is 5 s on.
  env.Advance(absl::Seconds(4));
  EXPECT_TRUE(rejoiner.CheckDeadline(cause).ok());
  ASSERT_TRUE(rejoiner.Rejoin(cause, works).ok());
  EXPECT_GE(env.slept(), absl::Milliseconds(50));  // Backed off first.
  env.Advance(start + absl::Seconds(150) - env.Now() - absl::Nanoseconds(1));
  EXPECT_TRUE(rejoiner.CheckDeadline(cause).ok());
  env.Advance(absl::Nanoseconds(1));
  EXPECT_FALSE(rejoiner.CheckDeadline(cause).ok());
}

}  // namespace
}  // namespace lockstep
