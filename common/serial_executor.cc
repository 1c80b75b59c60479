#include "common/serial_executor.h"

#include <algorithm>
#include <utility>

namespace lockstep {

SerialExecutor::SerialExecutor(int max_waiting)
    : max_waiting_(max_waiting < 0 ? 0 : max_waiting),
      thread_([this] { Loop(); }) {}

SerialExecutor::~SerialExecutor() { Shutdown(); }

bool SerialExecutor::Submit(std::function<void()> task) {
  {
    std::lock_guard<std::mutex> lock(mu_);
    // The task about to run counts as running while it is still queued.
    const int taken = static_cast<int>(waiting_.size()) + (running_ ? 1 : 0);
    if (stopping_ || taken >= max_waiting_ + 1) {
      return false;
    }
    waiting_.push_back(std::move(task));
  }
  work_.notify_one();
  return true;
}

int SerialExecutor::waiting() {
  std::lock_guard<std::mutex> lock(mu_);
  // Not counting one that is about to start.
  const int queued = static_cast<int>(waiting_.size());
  return running_ ? queued : std::max(queued - 1, 0);
}

void SerialExecutor::Shutdown() {
  {
    std::lock_guard<std::mutex> lock(mu_);
    stopping_ = true;
  }
  work_.notify_one();
  std::call_once(joined_, [this] { thread_.join(); });
}

void SerialExecutor::Loop() {
  std::unique_lock<std::mutex> lock(mu_);
  for (;;) {
    work_.wait(lock, [this] { return stopping_ || !waiting_.empty(); });
    if (waiting_.empty()) return;  // Stopping, nothing left.
    std::function<void()> task = std::move(waiting_.front());
    waiting_.pop_front();
    running_ = true;
    lock.unlock();
    task();
    lock.lock();
    running_ = false;
  }
}

}  // namespace lockstep
