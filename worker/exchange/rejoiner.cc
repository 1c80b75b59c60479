#include "worker/exchange/rejoiner.h"

#include <algorithm>
#include <cstdio>
#include <utility>

#include "absl/strings/str_cat.h"
#include "common/base/exit_codes.h"
#include "common/base/random.h"

namespace lockstep {

Rejoiner::Rejoiner(std::string who, uint64_t seed, int rank,
                   absl::Duration rejoin_timeout, std::string timeout_name,
                   Env* env)
    : who_(std::move(who)),
      timeout_name_(std::move(timeout_name)),
      seed_(seed),
      rank_(rank),
      rejoin_timeout_(rejoin_timeout),
      env_(env),
      last_success_(env->Now()),
      last_answer_(last_success_) {}

void Rejoiner::StepSucceeded() {
  last_success_ = last_answer_ = env_->Now();
  backoff_ = kFirstBackoff;
  rejoined_without_a_step_ = false;
}

void Rejoiner::Progressed() {
  const absl::Time now = env_->Now();
  last_success_ = std::min(now, last_success_ + (now - last_answer_));
  last_answer_ = now;
}

absl::Status Rejoiner::CheckDeadline(const absl::Status& cause) const {
  if (env_->Now() < last_success_ + rejoin_timeout_) return absl::OkStatus();
  return absl::Status(
      cause.code(),
      absl::StrCat("no step succeeded in ",
                   absl::FormatDuration(rejoin_timeout_), " (", timeout_name_,
                   "); giving up: ", cause.message()));
}

bool Rejoiner::Backoff(uint64_t jitter_seed) {
  Random jitter(jitter_seed);
  // Jitter (half to all of the backoff): the workers of a restarted server
  // do not all come back in the same instant.
  absl::Duration left = backoff_ * (0.5 + 0.5 * jitter.UniformFloat());
  backoff_ = std::min(backoff_ * 2, kMostBackoff);
  // In slices, so that a stop ends the sleep.
  while (left > absl::ZeroDuration() && !Stopped()) {
    const absl::Duration slice = std::min(left, kStopCheck);
    env_->SleepFor(slice);
    left -= slice;
  }
  return !Stopped();
}

absl::StatusOr<int64_t> Rejoiner::Rejoin(const absl::Status& cause,
                                         const JoinFn& join) {
  std::fprintf(stderr, "%s: %s; registering again\n", who_.c_str(),
               cause.ToString().c_str());
  const uint64_t stream =
      Random::Derive(Random::Derive(seed_, 1000 + rank_), rejoins_);
  ++rejoins_;
  uint64_t attempt = 0;
  const absl::Status stopped =
      absl::CancelledError("stopped while registering again (a stop signal)");
  if (rejoined_without_a_step_ && !Backoff(Random::Derive(stream, attempt++))) {
    return stopped;
  }
  const absl::Time deadline = last_success_ + rejoin_timeout_;
  while (true) {
    absl::StatusOr<int64_t> version =
        join(std::max(deadline - env_->Now(), absl::Milliseconds(100)));
    if (version.ok()) {
      rejoined_without_a_step_ = true;
      last_answer_ = env_->Now();
      return version;
    }
    if (!IsRetryable(version.status())) return version;
    if (env_->Now() + backoff_ >= deadline) {
      return absl::Status(
          version.status().code(),
          absl::StrCat("gave up registering again after ",
                       absl::FormatDuration(rejoin_timeout_), " (",
                       timeout_name_, "): ", version.status().message()));
    }
    if (!Backoff(Random::Derive(stream, attempt++))) return stopped;
  }
}

}  // namespace lockstep
