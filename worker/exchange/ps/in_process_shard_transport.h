// The in-process ShardTransport: calls a lockstep::ParameterServer object
// in the same process, with no sockets and no serialization, so that tests
// run workers' PsClients (and the exchangers and trainers above them)
// against real shards on threads. A push's payload is summed in place, as
// over gRPC, and replies are the published snapshot itself (fp32) or its
// shared encoding. Callbacks run on the thread that completes the call: the
// caller's, or the thread of the worker whose push closes the step.
// Deadlines are not enforced. Links the server core; the production worker
// does not use it.
#ifndef LOCKSTEP_WORKER_EXCHANGE_PS_IN_PROCESS_SHARD_TRANSPORT_H_
#define LOCKSTEP_WORKER_EXCHANGE_PS_IN_PROCESS_SHARD_TRANSPORT_H_

#include <memory>
#include <string>

#include "server/core/parameter_server.h"
#include "worker/exchange/ps/shard_transport.h"

namespace lockstep {

class InProcessShardTransport final : public ShardTransport {
 public:
  // `server` is not owned and outlives the transport and its calls.
  explicit InProcessShardTransport(ParameterServer* server) : server_(server) {}

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
  std::unique_ptr<PreparedPush> PreparePush(const PushArgs& args) override;
  void StartPush(PreparedPush* push, ReplyCallback done) override;

 private:
  ParameterServer* const server_;  // Not owned.
};

}  // namespace lockstep

#endif  // LOCKSTEP_WORKER_EXCHANGE_PS_IN_PROCESS_SHARD_TRANSPORT_H_
