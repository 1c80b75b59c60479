#include "worker/exchange/ps/push_thread.h"

#include <utility>

namespace lockstep {

PushThread::PushThread() : thread_([this] { Loop(); }) {}

PushThread::~PushThread() {
  {
    std::lock_guard<std::mutex> lock(mu_);
    stop_ = true;
  }
  work_.notify_one();
  thread_.join();
}

void PushThread::Submit(std::function<void()> work) {
  {
    std::lock_guard<std::mutex> lock(mu_);
    queue_.push_back(std::move(work));
  }
  work_.notify_one();
}

void PushThread::WaitIdle() {
  std::unique_lock<std::mutex> lock(mu_);
  idle_.wait(lock, [this] { return queue_.empty() && !running_; });
}

void PushThread::Loop() {
  std::unique_lock<std::mutex> lock(mu_);
  for (;;) {
    work_.wait(lock, [this] { return stop_ || !queue_.empty(); });
    if (queue_.empty()) return;  // stop_, and nothing left to run.
    std::function<void()> work = std::move(queue_.front());
    queue_.pop_front();
    running_ = true;
    lock.unlock();
    work();
    work = nullptr;  // Whatever it holds goes before the thread is idle.
    lock.lock();
    running_ = false;
    if (queue_.empty()) idle_.notify_all();
  }
}

}  // namespace lockstep
