#include "common/base/serial_executor.h"

#include <algorithm>
#include <utility>

namespace lockstep {

SerialExecutor::SerialExecutor(int max_waiting)
    : max_waiting_(max_waiting < 0 ? 0 : max_waiting),
      thread_([this] { Loop(); }) {}

SerialExecutor::~SerialExecutor() { Shutdown(); }

bool SerialExecutor::Submit(std::function<void()> task) {
  {
    absl::MutexLock lock(&mu_);
    // The task about to run counts as running while it is still queued.
    const int taken = static_cast<int>(waiting_.size()) + (running_ ? 1 : 0);
    if (stopping_ || taken >= max_waiting_ + 1) {
      return false;
    }
    waiting_.push_back(std::move(task));
  }
  return true;
}

int SerialExecutor::waiting() {
  absl::MutexLock lock(&mu_);
  // Not counting one that is about to start.
  const int queued = static_cast<int>(waiting_.size());
  return running_ ? queued : std::max(queued - 1, 0);
}

void SerialExecutor::Shutdown() {
  {
    absl::MutexLock lock(&mu_);
    stopping_ = true;
  }
  std::call_once(joined_, [this] { thread_.join(); });
}

void SerialExecutor::Loop() {
  mu_.Lock();
  for (;;) {
    mu_.Await(absl::Condition(this, &SerialExecutor::HasTaskOrStopping));
    if (waiting_.empty()) break;  // Stopping, nothing left.
    std::function<void()> task = std::move(waiting_.front());
    waiting_.pop_front();
    running_ = true;
    mu_.Unlock();
    task();
    mu_.Lock();
    running_ = false;
  }
  mu_.Unlock();
}

}  // namespace lockstep
