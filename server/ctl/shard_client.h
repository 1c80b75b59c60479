// lockstep_ctl's connection to one parameter-server shard: GetStatus,
// SaveCheckpoint and grpc.health.v1, converted into plain structs (protobuf
// types stay in shard_client.cc). Every call has a deadline. Thread-compatible.
#ifndef LOCKSTEP_SERVER_CTL_SHARD_CLIENT_H_
#define LOCKSTEP_SERVER_CTL_SHARD_CLIENT_H_

#include <cstdint>
#include <map>
#include <memory>
#include <string>
#include <utility>
#include <vector>

#include "absl/status/statusor.h"
#include "absl/time/time.h"
#include "common/ops/health_client.h"
#include "common/ops/straggler_verdict.h"
#include "common/security/tls.h"
#include "lockstep/v1/lockstep.pb.h"

namespace grpc {
class Channel;
}  // namespace grpc

namespace lockstep {

// What a shard said in GetStatus (see StatusResponse in lockstep.proto).
struct ShardStatus {
  int shard = 0;
  int num_shards = 1;
  int64_t version = -1;
  int num_workers = 0;
  int num_chunks = 0;
  std::vector<int> registered_ranks;
  std::vector<int> pushed_ranks;  // Pushed every chunk of step `version`.
  std::vector<int> finished_ranks;
  absl::Time server_time;  // The shard's clock when it answered.
  struct Worker {
    int rank = 0;
    absl::Time last_contact = absl::InfinitePast();  // Past: never.
    int64_t last_step = -1;
    double last_step_seconds = 0;  // 0: not known yet.
    RankTiming timing;  // Its recent steps (StepWindow).
  };
  std::vector<Worker> workers;  // By rank.
  // The model, when a worker has registered: "101770 parameters, adam,
  // sync".
  std::string model;
  bool synchronous = true;  // The job's sync mode is "sync".
  int64_t pushes_accepted = 0;
  int64_t pushes_refused = 0;
  int64_t pushes_dropped_late = 0;
  int64_t waits_cancelled = 0;  // ServerCounters.waits_cancelled.
  int64_t bytes_received = 0;
  int64_t bytes_sent = 0;
  std::map<std::string, int64_t> pushes_refused_by_code;
};

// The status line's "Model:": parameters, tensors, optimizer, sync mode
// and length ("101770 parameters in 4 tensors, adam, sync, total 2340
// steps"; a LocalSGD or DiLoCo job's names the outer optimizer, its rounds
// and the inner one).
std::string DescribeModel(const v1::ModelSignature& signature);

class ShardClient final {
 public:
  // A channel to `address` (host:port) secured as `tls` says (the --tls_*
  // flags). Connects lazily: an unreachable shard shows in the calls.
  static absl::StatusOr<std::unique_ptr<ShardClient>> Create(
      const std::string& address, const TlsOptions& tls);
  ~ShardClient();

  // With `wait` > 0 a long poll: the server answers after `wait`, or at
  // once when it finishes (with its final status); `timeout` is on top.
  absl::StatusOr<ShardStatus> GetStatus(
      absl::Duration timeout, absl::Duration wait = absl::ZeroDuration());
  // grpc.health.v1 Check for the server as a whole.
  absl::StatusOr<HealthStatus> Health(absl::Duration timeout);
  // What a server wrote on request (both paths empty, version -1: the
  // shard owns no chunk of the model, and has nothing to save).
  struct Saved {
    std::string checkpoint;    // Empty: it has no --checkpoint_dir.
    std::string weights_file;  // Empty: it has no --weights_file.
    int64_t version = 0;
  };
  // Writes a checkpoint and the weights file now, as configured.
  absl::StatusOr<Saved> SaveCheckpoint(absl::Duration timeout);

  const std::string& address() const { return address_; }

 private:
  ShardClient(std::string address, std::shared_ptr<grpc::Channel> channel,
              std::string tls_hint);

  const std::string address_;
  const std::shared_ptr<grpc::Channel> channel_;
  // Added to the errors of a closed connection (TlsHint).
  const std::string tls_hint_;
};

}  // namespace lockstep

#endif  // LOCKSTEP_SERVER_CTL_SHARD_CLIENT_H_
