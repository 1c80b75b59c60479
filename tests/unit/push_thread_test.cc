// PushThread (worker/exchange/ps/push_thread.h), a SerialExecutor with
// WaitIdle: work runs in submission order on one thread that is not the
// caller's; no amount of waiting work is refused; WaitIdle returns only once
// the work running has ended and dropped what it held; destruction runs what
// is left first.
#include "worker/exchange/ps/push_thread.h"

#include <atomic>
#include <memory>
#include <thread>
#include <vector>

#include "absl/synchronization/notification.h"
#include "absl/time/clock.h"
#include "absl/time/time.h"
#include "gtest/gtest.h"

namespace lockstep {
namespace {

TEST(PushThreadTest, RunsWorkInOrderOnOneOtherThread) {
  constexpr int kItems = 200;
  std::vector<int> order;  // Touched by the push thread only until idle.
  std::vector<std::thread::id> threads;
  PushThread pusher;
  for (int i = 0; i < kItems; ++i) {
    pusher.Submit([&, i] {
      order.push_back(i);
      threads.push_back(std::this_thread::get_id());
    });
  }
  pusher.WaitIdle();
  ASSERT_EQ(order.size(), kItems);
  for (int i = 0; i < kItems; ++i) {
    EXPECT_EQ(order[i], i);
    EXPECT_EQ(threads[i], threads[0]);
  }
  EXPECT_NE(threads[0], std::this_thread::get_id());
}

TEST(PushThreadTest, WaitIdleWaitsForTheWorkRunning) {
  PushThread pusher;
  absl::Notification started, go;
  std::atomic<bool> done{false}, returned{false};
  pusher.Submit([&] {
    started.Notify();
    go.WaitForNotification();
    done = true;
  });
  // Off the queue: only the executor's running piece says busy.
  started.WaitForNotification();
  std::thread waiter([&] {
    pusher.WaitIdle();
    returned = true;
  });
  absl::SleepFor(absl::Milliseconds(50));
  EXPECT_FALSE(returned.load());
  go.Notify();
  waiter.join();
  EXPECT_TRUE(done.load());
  pusher.WaitIdle();  // Idle already: returns at once.
}

TEST(PushThreadTest, WaitIdleReturnsOnceTheWorkDroppedWhatItHeld) {
  PushThread pusher;
  auto buffer = std::make_shared<int>(7);
  std::atomic<int> seen{0};
  pusher.Submit([&seen, held = buffer] { seen = *held; });
  pusher.WaitIdle();
  EXPECT_EQ(seen.load(), 7);
  EXPECT_EQ(buffer.use_count(), 1);  // The work's copy is gone.
}

TEST(PushThreadTest, RefusesNoWorkHoweverMuchWaits) {
  constexpr int kWaiting = 10000;  // More chunks than any model's step has.
  PushThread pusher;
  absl::Notification go;
  std::atomic<int> ran{0};
  pusher.Submit([&] { go.WaitForNotification(); });
  for (int i = 0; i < kWaiting; ++i) pusher.Submit([&] { ++ran; });
  go.Notify();
  pusher.WaitIdle();
  EXPECT_EQ(ran.load(), kWaiting);
}

TEST(PushThreadTest, DestructionRunsWhatWasSubmitted) {
  std::atomic<int> ran{0};
  {
    PushThread pusher;
    for (int i = 0; i < 50; ++i) {
      pusher.Submit([&] {
        absl::SleepFor(absl::Microseconds(100));
        ++ran;
      });
    }
  }
  EXPECT_EQ(ran.load(), 50);
}

}  // namespace
}  // namespace lockstep
