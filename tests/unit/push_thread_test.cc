// PushThread (worker/exchange/ps/push_thread.h): work runs in submission order
// on one thread that is not the caller's; WaitIdle returns only once the work
// running has ended; destruction runs what is left first.
#include "worker/exchange/ps/push_thread.h"

#include <atomic>
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
  started.WaitForNotification();  // Off the queue: only running_ says busy.
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
