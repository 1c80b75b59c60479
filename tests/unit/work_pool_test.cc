#include "common/base/work_pool.h"

#include <atomic>
#include <cstdint>
#include <thread>
#include <vector>

#include "gtest/gtest.h"

namespace lockstep {
namespace {

// Every element is visited exactly once, in blocks of `grain` (the last
// shorter), for counts around the block size.
TEST(WorkPoolTest, CoversEveryElementOnceInBlocks) {
  for (int threads : {1, 2, 4}) {
    WorkPool pool(threads);
    EXPECT_EQ(pool.threads(), threads);
    for (int64_t count : {0, 1, 9, 10, 11, 1000, 1001}) {
      std::vector<std::atomic<int>> seen(static_cast<size_t>(count));
      std::atomic<int> bad_blocks{0};
      pool.ParallelFor(count, 10, [&](int64_t begin, int64_t end) {
        if (begin % 10 != 0 || end - begin > 10 || end <= begin ||
            (end - begin < 10 && end != count)) {
          ++bad_blocks;
        }
        for (int64_t i = begin; i < end; ++i) ++seen[static_cast<size_t>(i)];
      });
      EXPECT_EQ(bad_blocks.load(), 0) << threads << " threads, " << count;
      for (int64_t i = 0; i < count; ++i) {
        ASSERT_EQ(seen[static_cast<size_t>(i)].load(), 1)
            << threads << " threads, count " << count << ", element " << i;
      }
    }
  }
}

// One block runs on the caller's thread alone.
TEST(WorkPoolTest, ASingleBlockRunsOnTheCaller) {
  WorkPool pool(3);
  const std::thread::id caller = std::this_thread::get_id();
  std::thread::id ran;
  int calls = 0;
  pool.ParallelFor(5, 10, [&](int64_t begin, int64_t end) {
    ran = std::this_thread::get_id();
    ++calls;
    EXPECT_EQ(begin, 0);
    EXPECT_EQ(end, 5);
  });
  EXPECT_EQ(calls, 1);
  EXPECT_EQ(ran, caller);
}

// With blocks that wait for each other, the loop finishes only if the
// helpers really take blocks while the caller works on another: two
// blocks, each waiting (bounded) until both have started.
TEST(WorkPoolTest, HelpersWorkBesideTheCaller) {
  WorkPool pool(2);
  std::atomic<int> started{0};
  std::atomic<int> saw_both{0};
  pool.ParallelFor(2, 1, [&](int64_t, int64_t) {
    ++started;
    for (int i = 0; i < 5000 && started.load() < 2; ++i) {
      std::this_thread::sleep_for(std::chrono::milliseconds(1));
    }
    if (started.load() == 2) ++saw_both;
  });
  EXPECT_EQ(saw_both.load(), 2);
}

// Several threads may call at once; each call's blocks are its own.
TEST(WorkPoolTest, ConcurrentCallersEachGetTheirWholeLoop) {
  WorkPool pool(3);
  constexpr int kCallers = 4;
  constexpr int64_t kCount = 20000;
  std::vector<std::vector<int>> seen(kCallers, std::vector<int>(kCount, 0));
  std::vector<std::thread> callers;
  for (int c = 0; c < kCallers; ++c) {
    callers.emplace_back([&, c] {
      for (int round = 0; round < 20; ++round) {
        pool.ParallelFor(kCount, 256, [&](int64_t begin, int64_t end) {
          for (int64_t i = begin; i < end; ++i) ++seen[c][i];
        });
      }
    });
  }
  for (std::thread& t : callers) t.join();
  for (int c = 0; c < kCallers; ++c) {
    for (int64_t i = 0; i < kCount; ++i) {
      ASSERT_EQ(seen[c][i], 20) << "caller " << c << " element " << i;
    }
  }
}

TEST(WorkPoolTest, AvailableCoresIsAtLeastOne) {
  const int cores = WorkPool::AvailableCores();
  EXPECT_GE(cores, 1);
  EXPECT_LE(cores, static_cast<int>(std::thread::hardware_concurrency()) + 0 +
                       (std::thread::hardware_concurrency() == 0 ? 1024 : 0));
}

}  // namespace
}  // namespace lockstep
