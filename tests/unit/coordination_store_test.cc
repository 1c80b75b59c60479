#include "server/coordination/coordination_store.h"

#include <optional>
#include <string>
#include <thread>
#include <vector>

#include "absl/strings/str_cat.h"
#include "absl/synchronization/notification.h"
#include "absl/time/clock.h"
#include "gmock/gmock.h"
#include "gtest/gtest.h"

namespace lockstep {
namespace {

using ::testing::HasSubstr;

// Records what a GetAsync callback received, and on which thread.
struct Got {
  std::optional<absl::StatusOr<std::string>> result;
  std::thread::id thread;
  CoordinationStore::ValueCallback Callback() {
    return [this](absl::StatusOr<std::string> v) {
      result = std::move(v);
      thread = std::this_thread::get_id();
    };
  }
};

TEST(CoordinationStoreTest, SetThenGet) {
  CoordinationStore store;
  absl::StatusOr<bool> created = store.Set("job/a", "1");
  ASSERT_TRUE(created.ok()) << created.status();
  EXPECT_TRUE(*created);
  EXPECT_EQ(store.TryGet("job/a").value(), "1");
  EXPECT_EQ(store.Get("job/a", absl::Now()).value(), "1");
  EXPECT_EQ(store.NumKeys(), 1u);
}

TEST(CoordinationStoreTest, ValuesAreBytes) {
  CoordinationStore store;
  const std::string value("\0\xff\x01", 3);
  ASSERT_TRUE(store.Set("k", value).ok());
  EXPECT_EQ(store.TryGet("k").value(), value);
}

TEST(CoordinationStoreTest, MissingKeyIsNotFoundWithoutWaiting) {
  CoordinationStore store;
  EXPECT_EQ(store.TryGet("nope").status().code(), absl::StatusCode::kNotFound);
}

TEST(CoordinationStoreTest, SetReplacesTheValueByDefault) {
  CoordinationStore store;
  ASSERT_TRUE(store.Set("k", "old").ok());
  absl::StatusOr<bool> created = store.Set("k", "new");
  ASSERT_TRUE(created.ok());
  EXPECT_FALSE(*created);
  EXPECT_EQ(store.TryGet("k").value(), "new");
}

TEST(CoordinationStoreTest, IfAbsentCreatesOnlyAndToleratesRetries) {
  CoordinationStore store;
  EXPECT_TRUE(store.Set("k", "v", /*if_absent=*/true).value());
  // The same value again: a retried Set succeeds without change.
  absl::StatusOr<bool> again = store.Set("k", "v", /*if_absent=*/true);
  ASSERT_TRUE(again.ok());
  EXPECT_FALSE(*again);
  absl::StatusOr<bool> other = store.Set("k", "w", /*if_absent=*/true);
  EXPECT_EQ(other.status().code(), absl::StatusCode::kAlreadyExists);
  EXPECT_THAT(other.status().message(), HasSubstr("\"k\""));
  EXPECT_EQ(store.TryGet("k").value(), "v");
}

TEST(CoordinationStoreTest, GetAsyncOfAnExistingKeyAnswersAtOnce) {
  CoordinationStore store;
  ASSERT_TRUE(store.Set("k", "v").ok());
  Got got;
  EXPECT_EQ(store.GetAsync("k", got.Callback()), 0);
  ASSERT_TRUE(got.result.has_value());
  EXPECT_EQ(got.result->value(), "v");
  EXPECT_EQ(got.thread, std::this_thread::get_id());
  EXPECT_EQ(store.NumWaiters(), 0u);
}

TEST(CoordinationStoreTest, GetAsyncWaitsThenWakesOnTheCreatingSet) {
  CoordinationStore store;
  Got first, second, other;
  EXPECT_NE(store.GetAsync("k", first.Callback()), 0);
  EXPECT_NE(store.GetAsync("k", second.Callback()), 0);
  EXPECT_NE(store.GetAsync("other", other.Callback()), 0);
  EXPECT_FALSE(first.result.has_value());
  EXPECT_EQ(store.NumWaiters(), 3u);

  // The Set runs the callbacks on its own thread.
  std::thread setter([&] { ASSERT_TRUE(store.Set("k", "v").ok()); });
  const std::thread::id setter_id = setter.get_id();
  setter.join();
  ASSERT_TRUE(first.result.has_value());
  ASSERT_TRUE(second.result.has_value());
  EXPECT_EQ(first.result->value(), "v");
  EXPECT_EQ(second.result->value(), "v");
  EXPECT_EQ(first.thread, setter_id);
  EXPECT_FALSE(other.result.has_value());
  EXPECT_EQ(store.NumWaiters(), 1u);
}

TEST(CoordinationStoreTest, CancelDropsTheCallback) {
  CoordinationStore store;
  Got got;
  const CoordinationStore::WaiterId id = store.GetAsync("k", got.Callback());
  EXPECT_TRUE(store.Cancel(id));
  EXPECT_FALSE(store.Cancel(id));
  EXPECT_EQ(store.NumWaiters(), 0u);
  ASSERT_TRUE(store.Set("k", "v").ok());
  EXPECT_FALSE(got.result.has_value());
}

TEST(CoordinationStoreTest, CancelAfterTheCallbackRanIsFalse) {
  CoordinationStore store;
  Got got;
  const CoordinationStore::WaiterId id = store.GetAsync("k", got.Callback());
  ASSERT_TRUE(store.Set("k", "v").ok());
  EXPECT_TRUE(got.result.has_value());
  EXPECT_FALSE(store.Cancel(id));
}

TEST(CoordinationStoreTest, CallbacksMayCallBackIntoTheStore) {
  CoordinationStore store;
  std::optional<absl::StatusOr<std::string>> inner;
  store.GetAsync("k", [&](absl::StatusOr<std::string>) {
    inner = store.TryGet("k");  // Not under the store's lock: no deadlock.
  });
  ASSERT_TRUE(store.Set("k", "v").ok());
  ASSERT_TRUE(inner.has_value());
  EXPECT_EQ(inner->value(), "v");
}

TEST(CoordinationStoreTest, BlockingGetWakesWhenAnotherThreadSets) {
  CoordinationStore store;
  std::optional<absl::StatusOr<std::string>> got;
  std::thread reader(
      [&] { got = store.Get("k", absl::Now() + absl::Seconds(30)); });
  // Parked first, so that the Set wakes it (rather than finding the key).
  EXPECT_TRUE(store.AwaitNumWaiters(1, absl::Now() + absl::Seconds(30)));
  ASSERT_TRUE(store.Set("k", "v").ok());
  reader.join();
  EXPECT_EQ(store.NumWaiters(), 0u);
  ASSERT_TRUE(got.has_value());
  EXPECT_EQ(got->value(), "v");
}

TEST(CoordinationStoreTest, BlockingGetGivesUpAtTheDeadline) {
  CoordinationStore store;
  const absl::Time start = absl::Now();
  absl::StatusOr<std::string> got =
      store.Get("k", start + absl::Milliseconds(100));
  EXPECT_EQ(got.status().code(), absl::StatusCode::kDeadlineExceeded);
  EXPECT_GE(absl::Now() - start, absl::Milliseconds(100));
  EXPECT_LT(absl::Now() - start, absl::Seconds(10));
}

TEST(CoordinationStoreTest, ShutdownFailsWaitersAndLaterCalls) {
  CoordinationStore store;
  Got got;
  store.GetAsync("k", got.Callback());
  std::optional<absl::StatusOr<std::string>> blocked;
  std::thread reader(
      [&] { blocked = store.Get("k", absl::Now() + absl::Seconds(30)); });
  // The callback and the blocked Get are both parked before the shutdown.
  EXPECT_TRUE(store.AwaitNumWaiters(2, absl::Now() + absl::Seconds(30)));
  store.Shutdown();
  reader.join();
  ASSERT_TRUE(got.result.has_value());
  EXPECT_EQ(got.result->status().code(), absl::StatusCode::kUnavailable);
  EXPECT_EQ(blocked->status().code(), absl::StatusCode::kUnavailable);
  EXPECT_EQ(store.Set("k", "v").status().code(),
            absl::StatusCode::kUnavailable);
  Got late;
  EXPECT_EQ(store.GetAsync("k", late.Callback()), 0);
  EXPECT_EQ(late.result->status().code(), absl::StatusCode::kUnavailable);
}

TEST(CoordinationStoreTest, RefusesBadKeysAndOversizedValues) {
  CoordinationStore store;
  EXPECT_EQ(store.Set("", "v").status().code(),
            absl::StatusCode::kInvalidArgument);
  const std::string long_key(CoordinationStore::kMaxKeyBytes + 1, 'k');
  EXPECT_EQ(store.Set(long_key, "v").status().code(),
            absl::StatusCode::kInvalidArgument);
  EXPECT_EQ(store.TryGet("").status().code(),
            absl::StatusCode::kInvalidArgument);
  Got got;
  EXPECT_EQ(store.GetAsync(long_key, got.Callback()), 0);
  EXPECT_EQ(got.result->status().code(), absl::StatusCode::kInvalidArgument);
  const std::string big(CoordinationStore::kMaxValueBytes + 1, 'v');
  EXPECT_EQ(store.Set("k", big).status().code(),
            absl::StatusCode::kInvalidArgument);
  EXPECT_TRUE(
      store.Set("k", std::string(CoordinationStore::kMaxValueBytes, 'v')).ok());
}

TEST(CoordinationStoreTest, RefusesNewKeysWhenFullButStillOverwrites) {
  CoordinationStore store;
  for (size_t i = 0; i < CoordinationStore::kMaxKeys; ++i) {
    ASSERT_TRUE(store.Set(absl::StrCat("k", i), "v").ok());
  }
  EXPECT_EQ(store.Set("one-more", "v").status().code(),
            absl::StatusCode::kResourceExhausted);
  EXPECT_TRUE(store.Set("k0", "w").ok());
  EXPECT_EQ(store.TryGet("k0").value(), "w");
}

// 65536 keys of 1 MiB would be 64 GiB: the bytes stored are bounded too,
// and a value that grows an existing key counts.
TEST(CoordinationStoreTest, RefusesValuesPastTheTotalBytes) {
  CoordinationStore store;
  const std::string mib(CoordinationStore::kMaxValueBytes, 'v');
  const size_t fit = CoordinationStore::kMaxTotalBytes / (mib.size() + 3);
  for (size_t i = 0; i < fit; ++i) {
    ASSERT_TRUE(store.Set(absl::StrCat("k", i % 10, i / 10 % 10), mib).ok())
        << i;
  }
  const absl::Status full = store.Set("new", mib).status();
  EXPECT_EQ(full.code(), absl::StatusCode::kResourceExhausted);
  EXPECT_THAT(std::string(full.message()), HasSubstr("bytes of keys"));
  // Shrinking a key frees room for a new one; growing it back counts.
  ASSERT_TRUE(store.Set("k00", "small").ok());
  EXPECT_TRUE(store.Set("new", mib).ok());
  EXPECT_EQ(store.Set("k00", mib).status().code(),
            absl::StatusCode::kResourceExhausted);
  EXPECT_EQ(store.TryGet("k00").value(), "small");
  EXPECT_EQ(store.NumKeys(), fit + 1);
}

TEST(CoordinationStoreTest, AwaitNumWaitersSeesAParkedGet) {
  CoordinationStore store;
  Got got;
  std::thread parker([&] { store.GetAsync("k", got.Callback()); });
  EXPECT_TRUE(store.AwaitNumWaiters(1, absl::Now() + absl::Seconds(30)));
  parker.join();
  EXPECT_FALSE(store.AwaitNumWaiters(0, absl::Now() + absl::Milliseconds(1)));
}

}  // namespace
}  // namespace lockstep
