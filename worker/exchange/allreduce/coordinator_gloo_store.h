// Gloo's rendezvous store, backed by the Coordinator service.
//
// gloo::rendezvous::Context::connectFullMesh publishes each rank's transport
// addresses through a Store and waits for the others'. This Store forwards
// to a CoordinatorClient under a key prefix, so gloo needs neither a shared
// file system nor Redis. Gloo's Store interface reports failure by throwing:
// every failure here throws StoreError, which carries the absl::Status, and
// the gloo backend (gloo_all_reducer.cc) turns it back into that status at
// its one exception boundary. Thread-safe (the client is).
#ifndef LOCKSTEP_WORKER_EXCHANGE_ALLREDUCE_COORDINATOR_GLOO_STORE_H_
#define LOCKSTEP_WORKER_EXCHANGE_ALLREDUCE_COORDINATOR_GLOO_STORE_H_

#include <chrono>
#include <string>
#include <vector>

#include "absl/status/status.h"
#include "absl/time/time.h"
#include "gloo/common/error.h"
#include "gloo/rendezvous/store.h"
#include "worker/exchange/allreduce/coordinator_client.h"

namespace lockstep {

// What the store throws; `status()` is the coordinator call's status.
class StoreError final : public gloo::Exception {
 public:
  explicit StoreError(absl::Status status)
      : gloo::Exception(status.ToString()), status_(std::move(status)) {}
  const absl::Status& status() const { return status_; }

 private:
  absl::Status status_;
};

class CoordinatorGlooStore final : public gloo::rendezvous::Store {
 public:
  // Keys are "<prefix><gloo's key>". `timeout` bounds a get and a wait that
  // gloo gives no timeout of its own. `client` is not owned and must outlive
  // the store.
  CoordinatorGlooStore(CoordinatorClient* client, std::string prefix,
                       absl::Duration timeout);

  void set(const std::string& key, const std::vector<char>& data) override;
  std::vector<char> get(const std::string& key) override;
  void wait(const std::vector<std::string>& keys) override;
  void wait(const std::vector<std::string>& keys,
            const std::chrono::milliseconds& timeout) override;

 private:
  CoordinatorClient* const client_;  // Not owned.
  const std::string prefix_;
  const absl::Duration timeout_;
};

}  // namespace lockstep

#endif  // LOCKSTEP_WORKER_EXCHANGE_ALLREDUCE_COORDINATOR_GLOO_STORE_H_
