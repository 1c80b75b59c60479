#include "common/base/serial_executor.h"

#include <atomic>
#include <chrono>
#include <thread>
#include <vector>

#include "absl/synchronization/notification.h"
#include "absl/time/time.h"
#include "gtest/gtest.h"

namespace lockstep {
namespace {

TEST(SerialExecutorTest, RunsTasksOneAtATimeInOrder) {
  std::vector<int> order;
  std::atomic<int> running{0}, most{0};
  {
    SerialExecutor executor(10);
    for (int i = 0; i < 10; ++i) {
      ASSERT_TRUE(executor.Submit([&, i] {
        const int now = ++running;
        if (now > most) most = now;
        order.push_back(i);  // One at a time: no lock needed.
        --running;
      }));
    }
  }  // The destructor runs what waits.
  EXPECT_EQ(order, (std::vector<int>{0, 1, 2, 3, 4, 5, 6, 7, 8, 9}));
  EXPECT_EQ(most.load(), 1);
}

// One task runs and `max_waiting` wait; the next is refused, and taken
// again once the queue moves.
TEST(SerialExecutorTest, RefusesPastTheBound) {
  SerialExecutor executor(2);
  absl::Notification started, release;
  std::atomic<int> ran{0};
  ASSERT_TRUE(executor.Submit([&] {
    started.Notify();
    release.WaitForNotificationWithTimeout(absl::Seconds(30));
    ++ran;
  }));
  ASSERT_TRUE(started.WaitForNotificationWithTimeout(absl::Seconds(30)));
  EXPECT_TRUE(executor.Submit([&] { ++ran; }));
  EXPECT_TRUE(executor.Submit([&] { ++ran; }));
  EXPECT_FALSE(executor.Submit([&] { ++ran; })) << "two wait already";
  release.Notify();
  executor.Shutdown();
  EXPECT_EQ(ran.load(), 3);
}

// Shutdown waits for the running task and the waiting ones; afterwards
// nothing is taken.
TEST(SerialExecutorTest, ShutdownFinishesWhatItTookThenRefuses) {
  SerialExecutor executor(1);
  absl::Notification started;
  std::atomic<bool> first_done{false}, second_done{false};
  ASSERT_TRUE(executor.Submit([&] {
    started.Notify();
    std::this_thread::sleep_for(std::chrono::milliseconds(100));
    first_done = true;
  }));
  // Once the first runs, one more may wait.
  ASSERT_TRUE(started.WaitForNotificationWithTimeout(absl::Seconds(30)));
  ASSERT_TRUE(executor.Submit([&] { second_done = true; }));
  EXPECT_EQ(executor.waiting(), 1);
  executor.Shutdown();
  EXPECT_TRUE(first_done.load());
  EXPECT_TRUE(second_done.load());
  bool ran = false;
  EXPECT_FALSE(executor.Submit([&] { ran = true; }));
  executor.Shutdown();  // Idempotent.
  EXPECT_FALSE(ran);
}

}  // namespace
}  // namespace lockstep
