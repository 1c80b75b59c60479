#include "common/env.h"

#include <cerrno>
#include <cstdio>
#include <cstring>

#include "absl/strings/str_cat.h"

namespace lockstep {
namespace {

class RealEnv final : public Env {
 public:
  absl::Time Now() override { return absl::Now(); }
  void SleepFor(absl::Duration duration) override {
    if (duration > absl::ZeroDuration()) absl::SleepFor(duration);
  }
};

}  // namespace

Env* Env::Default() {
  static Env* const env = new RealEnv();
  return env;
}

absl::Status Env::RenameFile(const std::string& from, const std::string& to) {
  if (std::rename(from.c_str(), to.c_str()) == 0) return absl::OkStatus();
  const int error = errno;
  return absl::InternalError(absl::StrCat("cannot rename ", from, " to ", to,
                                          ": ", std::strerror(error)));
}

absl::Time FakeEnv::Now() {
  absl::MutexLock lock(&mu_);
  return now_;
}

void FakeEnv::SleepFor(absl::Duration duration) {
  if (duration <= absl::ZeroDuration()) return;
  absl::MutexLock lock(&mu_);
  now_ += duration;
  slept_ += duration;
}

void FakeEnv::Advance(absl::Duration duration) {
  absl::MutexLock lock(&mu_);
  now_ += duration;
}

absl::Duration FakeEnv::slept() {
  absl::MutexLock lock(&mu_);
  return slept_;
}

}  // namespace lockstep
