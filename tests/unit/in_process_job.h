// What the in-process PS tests share: a job's ParameterServer shards in
// this process and PsClients over InProcessShardTransport to all of them,
// and a transport that refuses pushes on demand.
#ifndef LOCKSTEP_TESTS_UNIT_IN_PROCESS_JOB_H_
#define LOCKSTEP_TESTS_UNIT_IN_PROCESS_JOB_H_

#include <atomic>
#include <memory>
#include <string>
#include <utility>
#include <vector>

#include "absl/status/statusor.h"
#include "common/base/status_macros.h"
#include "server/core/parameter_server.h"
#include "worker/exchange/ps/in_process_shard_transport.h"
#include "worker/exchange/ps/ps_client.h"

namespace lockstep {

class InProcessJob {
 public:
  static absl::StatusOr<InProcessJob> Create(int num_workers, int num_shards) {
    InProcessJob job;
    for (int shard = 0; shard < num_shards; ++shard) {
      ParameterServerOptions options;
      options.num_workers = num_workers;
      options.shard = shard;
      options.num_shards = num_shards;
      ASSIGN_OR_RETURN(std::unique_ptr<ParameterServer> server,
                       ParameterServer::Create(options));
      job.servers_.push_back(std::move(server));
    }
    return job;
  }

  // A client of every shard, in shard order; it must go before the job.
  absl::StatusOr<std::unique_ptr<PsClient>> NewClient(
      const PsClientOptions& options) const {
    std::vector<std::unique_ptr<ShardTransport>> shards;
    for (const std::unique_ptr<ParameterServer>& server : servers_) {
      shards.push_back(std::make_unique<InProcessShardTransport>(server.get()));
    }
    return PsClient::CreateOver(options, std::move(shards));
  }

  ParameterServer* server(int shard) const { return servers_[shard].get(); }

 private:
  InProcessJob() = default;
  std::vector<std::unique_ptr<ParameterServer>> servers_;
};

// The in-process transport to `server`, refusing pushes (ABORTED, as a
// shard that gave the step up) while `refuse` (not owned) is set.
class RefusingTransport final : public ShardTransport {
 public:
  RefusingTransport(ParameterServer* server, const std::atomic<bool>* refuse)
      : inner_(server), refuse_(refuse) {}
  std::string Describe() const override { return inner_.Describe(); }
  void Register(int rank, const ModelSignature& signature, absl::Time deadline,
                ShardRegistration* reply, StatusCallback done) override {
    inner_.Register(rank, signature, deadline, reply, std::move(done));
  }
  void Initialize(int rank, int64_t incarnation, int chunk,
                  absl::Span<const float> weights, absl::Time deadline,
                  StatusCallback done) override {
    inner_.Initialize(rank, incarnation, chunk, weights, deadline,
                      std::move(done));
  }
  void Pull(const PullArgs& args, ReplyCallback done) override {
    inner_.Pull(args, std::move(done));
  }
  void Leave(int rank, int64_t incarnation, const LeaveNote& note,
             absl::Time deadline, StatusCallback done) override {
    inner_.Leave(rank, incarnation, note, deadline, std::move(done));
  }
  void Average(int rank, int64_t incarnation, int64_t round,
               const std::string& name, absl::Span<const double> values,
               absl::Time deadline, std::vector<double>* mean,
               StatusCallback done) override {
    inner_.Average(rank, incarnation, round, name, values, deadline, mean,
                   std::move(done));
  }
  std::unique_ptr<PreparedPush> PreparePush(const PushArgs& args) override {
    return inner_.PreparePush(args);
  }
  void StartPush(PreparedPush* push, ReplyCallback done) override {
    if (refuse_->load()) {
      done(absl::AbortedError("step given up"), WeightsPieces());
      return;
    }
    inner_.StartPush(push, std::move(done));
  }

 private:
  InProcessShardTransport inner_;
  const std::atomic<bool>* const refuse_;
};

}  // namespace lockstep

#endif  // LOCKSTEP_TESTS_UNIT_IN_PROCESS_JOB_H_
