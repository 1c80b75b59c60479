// The published versions of one chunk: the latest snapshot (the master
// weights, immutable once published) with its reply encodings, the pulls
// waiting for a later version, and the snapshot that exact pulls of the
// version before share. Also what a chunk hands out (ChunkSnapshot,
// ChunkCallback) and the answers it runs once its lock is released
// (ChunkAnswers).
//
// ChunkVersions is not thread-safe: ChunkBarrier's lock guards it, except
// published_version(), which is lock-free.
#ifndef LOCKSTEP_SERVER_CORE_CHUNK_VERSIONS_H_
#define LOCKSTEP_SERVER_CORE_CHUNK_VERSIONS_H_

#include <atomic>
#include <cstdint>
#include <functional>
#include <memory>
#include <string>
#include <utility>
#include <vector>

#include "absl/base/thread_annotations.h"
#include "absl/status/statusor.h"
#include "absl/synchronization/mutex.h"
#include "common/wire/wire_codec.h"

namespace lockstep {

// The bf16 or fp16 encoding of one published version, made by the first
// reply that needs it and shared by the replies in flight with it: W
// workers' replies to a step cost one encode and one buffer, not W. It is
// held only by those replies (the chunk keeps a weak reference), so it is
// freed once they are sent; a later reply encodes again. Thread-safe.
class EncodedWeights {
 public:
  // `values` encoded as `dtype` (bf16 or fp16); `values` must be the
  // version's weights, the same on every call.
  std::shared_ptr<const std::string> Get(WireDType dtype,
                                         const std::vector<float>& values);

 private:
  absl::Mutex mu_;
  std::weak_ptr<const std::string> bf16_ ABSL_GUARDED_BY(mu_);
  std::weak_ptr<const std::string> fp16_ ABSL_GUARDED_BY(mu_);
};

// The weights of one chunk at one version. Immutable once published.
struct ChunkSnapshot {
  int chunk = 0;
  int64_t version = 0;
  std::shared_ptr<const std::vector<float>> values;
  // Encodings of `values` for the replies; never null in a snapshot that
  // ChunkBarrier hands out.
  std::shared_ptr<EncodedWeights> encoded;
};

using ChunkCallback = std::function<void(absl::StatusOr<ChunkSnapshot>)>;

// Callbacks gathered under a chunk's lock, run once it is released.
class ChunkAnswers {
 public:
  void Add(ChunkCallback cb, absl::StatusOr<ChunkSnapshot> result) {
    calls_.emplace_back(std::move(cb), std::move(result));
  }
  void Run() {
    for (auto& [cb, result] : calls_) cb(std::move(result));
  }

 private:
  std::vector<std::pair<ChunkCallback, absl::StatusOr<ChunkSnapshot>>> calls_;
};

class ChunkVersions {
 public:
  explicit ChunkVersions(int chunk) : chunk_(chunk) {}

  bool initialized() const { return initialized_; }
  // -1 before initialization.
  int64_t version() const { return version_; }
  // version(), read without the lock.
  int64_t published_version() const { return published_version_.load(); }
  // The latest version's weights; only once initialized.
  const std::vector<float>& weights() const { return *published_; }
  ChunkSnapshot Snapshot() const {
    return ChunkSnapshot{chunk_, version_, published_, encoded_};
  }

  // Makes `weights` version `version` (its encodings made afresh). With
  // `answer_all` every waiting pull gets it; otherwise those it satisfies.
  void Publish(int64_t version,
               std::shared_ptr<const std::vector<float>> weights,
               bool answer_all, ChunkAnswers* answers);
  // `done` gets the first published version >= min_version.
  void AddPullWaiter(int64_t min_version, ChunkCallback done) {
    pull_waiters_.emplace_back(min_version, std::move(done));
  }

  // The version before the latest, as `previous` (the accumulator's copy
  // of its weights) holds it: one snapshot shared by every exact pull
  // until ForgetPrevious (not one per call: a caller could pile them up).
  ChunkSnapshot ExactPrevious(const std::vector<float>& previous);
  void ForgetPrevious() {
    previous_.reset();
    previous_encoded_.reset();
  }

  // Answers every waiting pull with `status`.
  void FailPulls(const absl::Status& status, ChunkAnswers* answers);
  // Frees the weights (replies already given keep their own reference).
  void Release() {
    published_.reset();
    previous_.reset();
  }

 private:
  const int chunk_;
  bool initialized_ = false;
  int64_t version_ = -1;
  std::atomic<int64_t> published_version_{-1};
  std::shared_ptr<const std::vector<float>> published_;
  std::shared_ptr<EncodedWeights> encoded_;
  std::shared_ptr<const std::vector<float>> previous_;
  std::shared_ptr<EncodedWeights> previous_encoded_;
  std::vector<std::pair<int64_t, ChunkCallback>> pull_waiters_;
};

}  // namespace lockstep

#endif  // LOCKSTEP_SERVER_CORE_CHUNK_VERSIONS_H_
