// A shard with a standby (lockstep_server --replicas=2 and --standby_of):
// one ShardTransport over the primary's and the standby's, which sends
// every call to the one the worker registered with last. Once a call there
// fails with UNAVAILABLE (the server is gone) the next Register tries the
// other first; Register goes round the replicas, each for a slice of its
// deadline, until one takes it (a standby holds registrations until it has
// taken over). The worker's own recovery (register again, pull the
// version the shard is at) does the rest: the standby took over at the
// version every worker holds (docs/faults.md, "Standby failover").
//
// Thread-safe, as the transports it wraps.
#ifndef LOCKSTEP_WORKER_EXCHANGE_PS_FAILOVER_SHARD_TRANSPORT_H_
#define LOCKSTEP_WORKER_EXCHANGE_PS_FAILOVER_SHARD_TRANSPORT_H_

#include <atomic>
#include <memory>
#include <string>
#include <vector>

#include "absl/time/time.h"
#include "worker/exchange/ps/shard_transport.h"

namespace lockstep {

class FailoverShardTransport final : public ShardTransport {
 public:
  // `replicas`: the primary first. `slice`: how long one Register try
  // waits for one replica.
  explicit FailoverShardTransport(
      std::vector<std::unique_ptr<ShardTransport>> replicas,
      absl::Duration slice = absl::Seconds(2));

  std::string Describe() const override;
  void Register(int rank, const ModelSignature& signature, absl::Time deadline,
                ShardRegistration* reply, StatusCallback done) override;
  void Initialize(int rank, int64_t incarnation, int chunk,
                  absl::Span<const float> weights, absl::Time deadline,
                  StatusCallback done) override;
  void Pull(const PullArgs& args, ReplyCallback done) override;
  void Leave(int rank, int64_t incarnation, const LeaveNote& note,
             absl::Time deadline, StatusCallback done) override;
  void Average(int rank, int64_t incarnation, int64_t round,
               const std::string& name, absl::Span<const double> values,
               absl::Time deadline, std::vector<double>* mean,
               StatusCallback done) override;
  void StepBack(int rank, int64_t incarnation, int64_t from, int64_t to,
                absl::Time deadline, StatusCallback done) override;
  absl::Status CheckTlsRefusal(absl::Duration timeout) override;
  std::unique_ptr<PreparedPush> PreparePush(const PushArgs& args) override;
  void StartPush(PreparedPush* push, ReplyCallback done) override;

  // The replica calls go to now (0: the primary).
  int active() const { return active_.load(); }

 private:
  struct RegisterTry;
  void TryRegister(std::shared_ptr<RegisterTry> attempt);
  ShardTransport* Active() const { return replicas_[active_.load()].get(); }
  // `done`, noting an UNAVAILABLE answer of replica `index`.
  StatusCallback Noting(int index, StatusCallback done);
  ReplyCallback NotingReply(int index, ReplyCallback done);

  const std::vector<std::unique_ptr<ShardTransport>> replicas_;
  const absl::Duration slice_;
  std::atomic<int> active_{0};
  // The active replica answered UNAVAILABLE since the last registration.
  std::atomic<bool> active_failed_{false};
};

}  // namespace lockstep

#endif  // LOCKSTEP_WORKER_EXCHANGE_PS_FAILOVER_SHARD_TRANSPORT_H_
