// What a server started with --workers=auto does before it is a parameter
// server: it listens on its address and learns the job's worker count from
// the first worker that calls — the num_workers of a Register's signature,
// or the size of a JoinGroup (an elastic job's workers, and all-reduce
// ranks, join their group at the coordinator first). That call is answered
// UNAVAILABLE ("register again"), which workers retry within their connect
// timeout; the daemon then builds the shard for that count and listens on
// the same port. Kubernetes runtimes use it so that one runtime serves
// TrainJobs of any numNodes: the workers know the count (PET_NNODES), the
// servers do not.
//
// The caller must pass the Authorizer's checks as it would for the real
// call. While the probe listens, the health service says SERVING (so that
// a JobSet's dependsOn Ready lets the workers start) and every other RPC
// is UNIMPLEMENTED.
#ifndef LOCKSTEP_SERVER_DAEMON_WORKER_COUNT_PROBE_H_
#define LOCKSTEP_SERVER_DAEMON_WORKER_COUNT_PROBE_H_

#include <functional>
#include <memory>
#include <string>

#include "absl/status/statusor.h"
#include "absl/synchronization/notification.h"
#include "common/security/authorizer.h"
#include "grpcpp/security/server_credentials.h"
#include "server/daemon/daemon_log.h"
#include "server/daemon/grpc_endpoint.h"

namespace lockstep {

struct LearnedWorkers {
  int workers = 0;
  int port = 0;        // Where the probe listened (also for --listen=:0).
  std::string source;  // "rank 2's Register", said in the log.
};

// Listens with `endpoint` until a caller tells the worker count (at most
// `max_workers`) or `stop` is notified (CANCELLED), calling `listening`
// with the port once it listens (false from it ends the probe, INTERNAL).
// UNAVAILABLE when the port cannot be had.
absl::StatusOr<LearnedWorkers> LearnWorkerCount(
    const GrpcEndpoint::Options& endpoint,
    const std::shared_ptr<grpc::ServerCredentials>& credentials,
    const Authorizer* authorizer, int max_workers, absl::Notification* stop,
    const std::function<bool(int port)>& listening, const DaemonLog& log);

}  // namespace lockstep

#endif  // LOCKSTEP_SERVER_DAEMON_WORKER_COUNT_PROBE_H_
