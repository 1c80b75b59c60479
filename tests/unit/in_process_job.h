// What the in-process PS tests share: a job's ParameterServer shards in
// this process and PsClients over InProcessShardTransport to all of them.
#ifndef LOCKSTEP_TESTS_UNIT_IN_PROCESS_JOB_H_
#define LOCKSTEP_TESTS_UNIT_IN_PROCESS_JOB_H_

#include <memory>
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

}  // namespace lockstep

#endif  // LOCKSTEP_TESTS_UNIT_IN_PROCESS_JOB_H_
