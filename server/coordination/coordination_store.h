// The rendezvous key/value store behind the Coordinator service
// (proto/lockstep/v1/coordination.proto), free of any transport.
//
// All-reduce workers publish what their peers need (transport addresses,
// NCCL's unique id) under agreed keys and read each other's, waiting until a
// key appears. The rules:
// - Keys are non-empty and at most kMaxKeyBytes; values at most
//   kMaxValueBytes; at most kMaxKeys keys and kMaxTotalBytes of keys and
//   values in all (INVALID_ARGUMENT / RESOURCE_EXHAUSTED otherwise).
// - Set replaces the value (last writer wins) unless `if_absent`: then it only
//   creates, fails with ALREADY_EXISTS when the key holds a different value,
//   and succeeds unchanged when it holds the same one (retries are harmless).
// - A read of a missing key waits until a Set creates it. Waiting never holds
//   a thread in the asynchronous form (GetAsync): the callback is stored and
//   run later by the creating Set's thread.
// - Keys are deleted only by ForgetGenerationsBefore: an all-reduce group's
//   records of generations older than the one that formed.
//
//   CoordinationStore store;
//   store.GetAsync("job/peer/1", [](absl::StatusOr<std::string> v) {...});
//   store.Set("job/peer/1", "10.0.0.2:4711");  // Runs the callback here.
//
// Thread-safe. Callbacks run on the thread that completes them (the creating
// Set's, GetAsync's own when the key exists, Shutdown's) and never under the
// internal lock, so they may call back into the store.
#ifndef LOCKSTEP_SERVER_COORDINATION_COORDINATION_STORE_H_
#define LOCKSTEP_SERVER_COORDINATION_COORDINATION_STORE_H_

#include <cstddef>
#include <cstdint>
#include <functional>
#include <string>
#include <vector>

#include "absl/base/thread_annotations.h"
#include "absl/container/flat_hash_map.h"
#include "absl/status/statusor.h"
#include "absl/strings/string_view.h"
#include "absl/synchronization/mutex.h"
#include "absl/time/time.h"

namespace lockstep {

class CoordinationStore final {
 public:
  static constexpr size_t kMaxKeyBytes = 1024;
  static constexpr size_t kMaxValueBytes = size_t{1} << 20;
  static constexpr size_t kMaxKeys = size_t{1} << 16;
  // Keys and values together: a rendezvous needs a few KB a worker.
  static constexpr size_t kMaxTotalBytes = size_t{64} << 20;

  using WaiterId = int64_t;
  using ValueCallback = std::function<void(absl::StatusOr<std::string>)>;

  CoordinationStore() = default;
  CoordinationStore(const CoordinationStore&) = delete;
  CoordinationStore& operator=(const CoordinationStore&) = delete;

  // Stores `value` under `key` and wakes the key's waiters. Returns true
  // when the key did not exist before. Errors: see the class comment;
  // UNAVAILABLE after Shutdown.
  absl::StatusOr<bool> Set(absl::string_view key, std::string value,
                           bool if_absent = false);

  // The key's value now: NOT_FOUND when it does not exist.
  absl::StatusOr<std::string> TryGet(absl::string_view key) const;

  // The key's value, waiting until a Set creates it. DEADLINE_EXCEEDED when
  // `deadline` passes first, UNAVAILABLE when the store shuts down.
  absl::StatusOr<std::string> Get(absl::string_view key,
                                  absl::Time deadline) const;

  // The asynchronous form of Get for transports: `done` receives the value
  // at once, on this thread, when the key exists (or an error for a bad key
  // or a shut-down store) and 0 is returned. Otherwise `done` is stored and
  // runs on the thread of the Set that creates the key (or of Shutdown, with
  // UNAVAILABLE), and the returned id can Cancel it. There is no deadline
  // here: the caller cancels when its own deadline passes.
  WaiterId GetAsync(absl::string_view key, ValueCallback done);

  // Forgets a waiter whose caller gave up. True when it was still waiting:
  // its callback is dropped without running. False when the callback has run
  // or is running (or the id is unknown).
  bool Cancel(WaiterId id);

  // Erases the keys of `group`'s generations before `generation`: those
  // under GenerationGroup(group, n) + "/" (common/rpc/group_membership.h) for
  // n < generation. Once a generation forms, no member reads an older
  // one's records. Returns the keys erased; a call for a generation no
  // newer than an earlier call's erases nothing and costs no scan. Waiters
  // are left alone (they wait for keys that do not exist).
  size_t ForgetGenerationsBefore(absl::string_view group, int64_t generation);

  // Fails every waiter with UNAVAILABLE and refuses later calls, so that a
  // transport can shut down without pending calls.
  void Shutdown();

  // Keys stored, and callbacks and blocking Gets waiting, for tests and
  // status pages.
  size_t NumKeys() const;
  size_t NumWaiters() const;
  // True once exactly `count` callbacks and blocking Gets are waiting; false
  // when `deadline` passes first. Lets a test wait for a Get to be parked
  // without sleeping.
  bool AwaitNumWaiters(size_t count, absl::Time deadline) const;

 private:
  struct Waiter {
    std::string key;
    ValueCallback done;
  };

  // Removes and returns the waiters of `key`.
  std::vector<ValueCallback> TakeWaitersLocked(const std::string& key)
      ABSL_EXCLUSIVE_LOCKS_REQUIRED(mu_);

  mutable absl::Mutex mu_;
  bool shut_down_ ABSL_GUARDED_BY(mu_) = false;
  absl::flat_hash_map<std::string, std::string> values_ ABSL_GUARDED_BY(mu_);
  size_t bytes_ ABSL_GUARDED_BY(mu_) = 0;  // Of the keys and values stored.
  absl::flat_hash_map<WaiterId, Waiter> waiters_ ABSL_GUARDED_BY(mu_);
  // The waiter ids of each awaited key, in arrival order.
  absl::flat_hash_map<std::string, std::vector<WaiterId>> waiters_by_key_
      ABSL_GUARDED_BY(mu_);
  WaiterId next_waiter_id_ ABSL_GUARDED_BY(mu_) = 1;
  // Per group, the generation ForgetGenerationsBefore last erased below.
  absl::flat_hash_map<std::string, int64_t> forgotten_below_
      ABSL_GUARDED_BY(mu_);
  // Callers of the blocking Get waiting now.
  mutable size_t blocked_gets_ ABSL_GUARDED_BY(mu_) = 0;
};

}  // namespace lockstep

#endif  // LOCKSTEP_SERVER_COORDINATION_COORDINATION_STORE_H_
