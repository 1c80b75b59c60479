#include "worker/exchange/allreduce/coordinator_gloo_store.h"

#include <utility>

#include "absl/strings/str_cat.h"
#include "absl/strings/string_view.h"

namespace lockstep {

CoordinatorGlooStore::CoordinatorGlooStore(CoordinatorClient* client,
                                           std::string prefix,
                                           absl::Duration timeout)
    : client_(client), prefix_(std::move(prefix)), timeout_(timeout) {}

void CoordinatorGlooStore::set(const std::string& key,
                               const std::vector<char>& data) {
  absl::Status status = client_->Set(
      absl::StrCat(prefix_, key), absl::string_view(data.data(), data.size()),
      absl::Now() + timeout_);
  if (!status.ok()) throw StoreError(std::move(status));
}

std::vector<char> CoordinatorGlooStore::get(const std::string& key) {
  absl::StatusOr<std::string> value =
      client_->Get(absl::StrCat(prefix_, key), absl::Now() + timeout_);
  if (!value.ok()) throw StoreError(value.status());
  return std::vector<char>(value->begin(), value->end());
}

void CoordinatorGlooStore::wait(const std::vector<std::string>& keys) {
  wait(keys, std::chrono::milliseconds::zero());
}

void CoordinatorGlooStore::wait(const std::vector<std::string>& keys,
                                const std::chrono::milliseconds& timeout) {
  // Gloo passes its context's timeout; zero means none was given.
  const absl::Time deadline =
      absl::Now() +
      (timeout.count() > 0 ? absl::FromChrono(timeout) : timeout_);
  for (const std::string& key : keys) {
    absl::StatusOr<std::string> value =
        client_->Get(absl::StrCat(prefix_, key), deadline);
    if (!value.ok()) throw StoreError(value.status());
  }
}

}  // namespace lockstep
