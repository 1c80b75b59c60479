#include "worker/device/cpu/cpu_thread_pool.h"

#include <atomic>
#include <chrono>
#include <cstdint>
#include <thread>
#include <vector>

#include "gtest/gtest.h"

namespace lockstep {
namespace {

// Every item in exactly one share, the shares where the header says, share
// 0 on the caller's thread and the others not, loop after loop.
TEST(CpuThreadPoolTest, SharesCoverEachItemOnceInFixedRuns) {
  for (int threads : {1, 2, 3, 5}) {
    CpuThreadPool pool(threads);
    ASSERT_EQ(pool.threads(), threads);
    for (int64_t count : {0, 1, 2, 7, 64, 1000}) {
      for (int round = 0; round < 50; ++round) {
        std::vector<std::atomic<int>> hits(count);
        std::vector<int64_t> begins(threads, -1), ends(threads, -1);
        std::vector<std::thread::id> ids(threads);
        pool.Run(count, [&](int share, int64_t begin, int64_t end) {
          begins[share] = begin;
          ends[share] = end;
          ids[share] = std::this_thread::get_id();
          for (int64_t i = begin; i < end; ++i) ++hits[i];
        });
        for (int64_t i = 0; i < count; ++i) ASSERT_EQ(hits[i], 1) << i;
        for (int s = 0; s < threads; ++s) {
          EXPECT_EQ(begins[s], count * s / threads);
          EXPECT_EQ(ends[s], count * (s + 1) / threads);
          if (s > 0) {
            EXPECT_NE(ids[s], std::this_thread::get_id());
          }
        }
        EXPECT_EQ(ids[0], std::this_thread::get_id());
      }
    }
  }
}

// Run returns only when every share is done, however long one takes.
TEST(CpuThreadPoolTest, RunWaitsForTheSlowestShare) {
  CpuThreadPool pool(4);
  std::atomic<int> done{0};
  pool.Run(4, [&](int share, int64_t, int64_t) {
    if (share == 3) std::this_thread::sleep_for(std::chrono::milliseconds(50));
    ++done;
  });
  EXPECT_EQ(done, 4);
}

TEST(CpuThreadPoolTest, ThreadsBelowOneMeanOne) {
  CpuThreadPool pool(0);
  EXPECT_EQ(pool.threads(), 1);
  int calls = 0;
  pool.Run(3, [&](int share, int64_t begin, int64_t end) {
    EXPECT_EQ(share, 0);
    EXPECT_EQ(begin, 0);
    EXPECT_EQ(end, 3);
    ++calls;
  });
  EXPECT_EQ(calls, 1);
}

}  // namespace
}  // namespace lockstep
