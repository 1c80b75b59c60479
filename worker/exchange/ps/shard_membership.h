// A worker's membership of the job at every parameter-server shard, for
// PsClient (ps_client.cc, its only user): Register, and what it yields (the
// chunk plan, the rank, each shard's incarnation), and the calls outside a
// step that need it: Initialize, Pull and Leave. Each of them makes one call
// per shard, or per chunk to the shard that owns it, all at once, and waits
// for all of them. The steps' pushes are PushStep's (push_step.h).
//
// Owns neither the transports nor a thread. Externally synchronized (the
// training thread), except LeaveFromAnyThread and LeaveAs, which any thread
// may call: the membership they use is copied under the class's own mutex.
#ifndef LOCKSTEP_WORKER_EXCHANGE_PS_SHARD_MEMBERSHIP_H_
#define LOCKSTEP_WORKER_EXCHANGE_PS_SHARD_MEMBERSHIP_H_

#include <cstdint>
#include <optional>
#include <string>
#include <vector>

#include "absl/base/thread_annotations.h"
#include "absl/status/status.h"
#include "absl/status/statusor.h"
#include "absl/synchronization/mutex.h"
#include "absl/time/time.h"
#include "absl/types/span.h"
#include "common/model/chunk_plan.h"
#include "common/model/model_signature.h"
#include "worker/exchange/ps/ps_client.h"
#include "worker/exchange/ps/shard_transport.h"

namespace lockstep {
namespace ps_client_internal {

class ShardMembership final {
 public:
  // Over `shards`, by shard (not owned; they must outlive it), with
  // `options`' clock, wire encoding, timeouts and cancel token.
  ShardMembership(const PsClientOptions& options,
                  std::vector<ShardTransport*> shards);

  // PsClient::Register: joins every shard as `rank`; on success the plan,
  // rank and incarnations below are this registration's.
  absl::StatusOr<RegisterResult> Register(int rank,
                                          const ModelSignature& requested,
                                          absl::Duration timeout);

  // The chunk plan of the registration; null before the first one. It
  // stays at the same address across registrations.
  const ChunkPlan* plan() const {
    return plan_.has_value() ? &*plan_ : nullptr;
  }
  int rank() const { return rank_; }
  const std::vector<int64_t>& incarnations() const { return incarnations_; }

  // FAILED_PRECONDITION before Register; INVALID_ARGUMENT when a vector of
  // `size` values is not the model's.
  absl::Status CheckRegistered(size_t size) const;

  // PsClient's calls of the same names.
  absl::Status Initialize(absl::Span<const float> weights);
  absl::StatusOr<int64_t> Pull(int64_t min_version, absl::Span<float> weights,
                               bool exact);
  // PsClient::StepBack.
  absl::Status StepBack(int shard, int64_t from, int64_t to);
  absl::Status Leave(const LeaveNote& note);
  absl::Status LeaveFromAnyThread() ABSL_LOCKS_EXCLUDED(member_mu_);
  // Says `rank`, of the given incarnations by shard, is done. Thread-safe:
  // reads only what is set at construction.
  absl::Status LeaveAs(int rank, const std::vector<int64_t>& incarnations,
                       const LeaveNote& note = {});

  // PsClient::Average: this rank's next round at shard 0.
  absl::StatusOr<std::vector<double>> Average(const std::string& name,
                                              absl::Span<const double> values,
                                              absl::Duration timeout);

  int num_shards() const { return static_cast<int>(shards_.size()); }

 private:
  // Registering with `shard` failed with `s` after waiting up to `waited`.
  absl::Status RegisterError(int shard, const absl::Status& s,
                             absl::Duration waited) const;

  const PsClientOptions options_;
  const std::vector<ShardTransport*> shards_;  // By shard; not owned.
  std::optional<ChunkPlan> plan_;
  int rank_ = -1;
  std::vector<int64_t> incarnations_;  // By shard.
  int64_t average_round_ = 0;          // The next; a failed one is tried again.
  struct Membership {
    int rank = -1;
    std::vector<int64_t> incarnations;
  };
  absl::Mutex member_mu_;  // rank_ and incarnations_ for LeaveFromAnyThread.
  Membership member_ ABSL_GUARDED_BY(member_mu_);
};

}  // namespace ps_client_internal
}  // namespace lockstep

#endif  // LOCKSTEP_WORKER_EXCHANGE_PS_SHARD_MEMBERSHIP_H_
