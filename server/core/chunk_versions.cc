#include "server/core/chunk_versions.h"

#include <algorithm>
#include <memory>
#include <utility>
#include <vector>

namespace lockstep {

std::shared_ptr<const std::string> EncodedWeights::Get(
    WireDType dtype, const std::vector<float>& values) {
  absl::MutexLock lock(&mu_);
  std::weak_ptr<const std::string>& slot =
      dtype == WireDType::kBfloat16 ? bf16_ : fp16_;
  if (std::shared_ptr<const std::string> shared = slot.lock()) return shared;
  auto encoded = std::make_shared<std::string>();
  EncodeTensor(values, dtype, encoded.get());
  slot = encoded;
  return encoded;
}

void ChunkVersions::Publish(int64_t version,
                            std::shared_ptr<const std::vector<float>> weights,
                            bool answer_all, ChunkAnswers* answers) {
  initialized_ = true;
  version_ = version;
  published_ = std::move(weights);
  encoded_ = std::make_shared<EncodedWeights>();
  published_version_.store(version_);
  auto ready = std::stable_partition(pull_waiters_.begin(), pull_waiters_.end(),
                                     [this, answer_all](const auto& p) {
                                       return !answer_all && p.first > version_;
                                     });
  for (auto it = ready; it != pull_waiters_.end(); ++it) {
    answers->Add(std::move(it->second), Snapshot());
  }
  pull_waiters_.erase(ready, pull_waiters_.end());
}

ChunkSnapshot ChunkVersions::ExactPrevious(const std::vector<float>& previous) {
  if (previous_ == nullptr) {
    previous_ = std::make_shared<const std::vector<float>>(previous);
    previous_encoded_ = std::make_shared<EncodedWeights>();
  }
  return ChunkSnapshot{chunk_, version_ - 1, previous_, previous_encoded_};
}

void ChunkVersions::FailPulls(const absl::Status& status,
                              ChunkAnswers* answers) {
  for (auto& [min_version, cb] : pull_waiters_) {
    answers->Add(std::move(cb), status);
  }
  pull_waiters_.clear();
}

}  // namespace lockstep
