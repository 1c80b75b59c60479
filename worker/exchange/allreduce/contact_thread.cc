#include "worker/exchange/allreduce/contact_thread.h"

#include <utility>

#include "absl/time/clock.h"

namespace lockstep {

ContactThread::ContactThread(CoordinatorClient* coordinator, std::string key,
                             absl::Duration every)
    : coordinator_(coordinator),
      key_(std::move(key)),
      every_(every),
      thread_([this] { Run(); }) {}

ContactThread::~ContactThread() {
  {
    absl::MutexLock lock(&mu_);
    stop_ = true;
  }
  thread_.join();
}

void ContactThread::Run() {
  while (true) {
    const absl::Time next = absl::Now() + every_;
    // Bounded by the tick: a coordinator away costs one tick, no more.
    coordinator_->Ping(key_, next).IgnoreError();
    absl::MutexLock lock(&mu_);
    if (mu_.AwaitWithDeadline(absl::Condition(&stop_), next)) return;
  }
}

}  // namespace lockstep
