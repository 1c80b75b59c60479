#include "worker/exchange/ps/push_thread.h"

#include <cstdio>
#include <cstdlib>
#include <future>
#include <limits>
#include <memory>
#include <utility>

namespace lockstep {
namespace {

// Work waits without a bound: a step hands over one piece per chunk and
// the push windows, not this queue, bound what is in flight. (The largest
// int less one: SerialExecutor counts the running piece on top.)
constexpr int kUnbounded = std::numeric_limits<int>::max() - 1;

// SerialExecutor refuses only after its shutdown, which only the
// destructor starts: a refusal is a use after destruction.
void SubmitOrDie(SerialExecutor* executor, std::function<void()> work) {
  if (!executor->Submit(std::move(work))) {
    std::fprintf(stderr, "PushThread: work submitted after shutdown\n");
    std::abort();
  }
}

}  // namespace

PushThread::PushThread() : executor_(kUnbounded) {}

void PushThread::Submit(std::function<void()> work) {
  // What the work holds (a chunk's buffers) goes as soon as it has run,
  // on the push thread, before anything later starts.
  SubmitOrDie(&executor_, [work = std::move(work)]() mutable {
    work();
    work = nullptr;
  });
}

void PushThread::WaitIdle() {
  // The executor runs one piece at a time, in order, and each piece drops
  // what it held when it ends (Submit): once this marker runs, everything
  // submitted before it has run and is gone. The promise is shared, so the
  // marker never touches this frame after WaitIdle has returned.
  auto idle = std::make_shared<std::promise<void>>();
  std::future<void> done = idle->get_future();
  SubmitOrDie(&executor_, [idle] { idle->set_value(); });
  done.wait();
}

}  // namespace lockstep
