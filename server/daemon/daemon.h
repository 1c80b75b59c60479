// The lockstep_server process around a ParameterServer: the gRPC server, the
// checkpointer, the step-timeout watchdog, and a clean end.
//
// Run() restores the newest intact checkpoint (if a folder is given), serves
// until every worker has left, a stop is requested (SIGTERM: drain, write a
// checkpoint, exit 0) or a worker is lost under --on_worker_loss=fail, and
// returns the process exit code. Used from one thread; Stop() may be called
// from any.
#ifndef LOCKSTEP_SERVER_DAEMON_DAEMON_H_
#define LOCKSTEP_SERVER_DAEMON_DAEMON_H_

#include <functional>
#include <memory>
#include <optional>
#include <string>

#include "absl/functional/function_ref.h"
#include "absl/synchronization/notification.h"
#include "absl/time/time.h"
#include "common/base/env.h"
#include "common/base/exit_codes.h"
#include "common/base/work_pool.h"
#include "common/security/grpc_limits.h"
#include "common/security/tls_options.h"
#include "server/core/checkpoint.h"
#include "server/core/parameter_server.h"
#include "server/daemon/checkpointer.h"
#include "server/daemon/grpc_endpoint.h"
#include "server/daemon/job_watchdog.h"
#include "server/daemon/straggler_watch.h"
#include "server/daemon/replication_source.h"
#include "server/daemon/server_telemetry.h"
#include "server/daemon/weights_file_writer.h"
#include "server/rpc/grpc_service.h"

namespace lockstep {

struct DaemonOptions {
  std::string listen;
  // 0: learned from the first worker that calls (--workers=auto,
  // worker_count_probe.h); Run() then listens on the same port.
  int workers = 1;
  int shard = 0;
  int num_shards = 1;
  std::string port_file;
  bool exit_when_done = true;
  int max_message_bytes = 64 << 20;  // Largest reply sent.
  // Largest chunk a worker may register (and Initialize or Push); larger
  // requests (this plus a margin) are refused from their length prefix.
  int64_t max_chunk_bytes = kDefaultChunkBytes;
  int64_t max_parameters = int64_t{1} << 30;  // Largest model registered.
  // ParameterServerOptions::max_state_bytes (0: no bound).
  int64_t max_state_bytes = 0;
  ServerLimits limits;         // Streams, keepalive, connection idle and age.
  TlsOptions tls;              // Credentials and who may call what.
  std::string checkpoint_dir;  // Empty: no checkpoints.
  // A checkpoint file or folder of another job that a new job starts from
  // when checkpoint_dir holds none (CheckpointStore::ReadForInit); empty:
  // none.
  std::string init_from;
  // The model as a safetensors file when every worker has left and on
  // request (one shard only); empty: none.
  std::string weights_file;
  int64_t checkpoint_every_steps = 0;
  absl::Duration checkpoint_every = absl::ZeroDuration();
  int checkpoints_to_keep = 3;
  // Start from version 0 even when checkpoint_dir holds only damaged
  // checkpoints (set aside as *.corrupt); otherwise that is refused.
  bool allow_fresh_start = false;
  // Once the job has begun: exit with the retryable code after this long
  // without a call from any worker, the job unfinished (every worker lost
  // and none replaced). Zero: wait for them forever.
  absl::Duration no_worker_timeout = absl::Seconds(600);
  // The file operations and clock of the checkpoint store
  // (CheckpointStore::Create), of --init_from's read and of the
  // --weights_file writer; not owned. A test binary's may pause them.
  Env* checkpoint_env = Env::Default();
  // --metrics_port and --trace; Run() fills in the shard and checkpoints.
  ServerTelemetryOptions telemetry;
  absl::Duration step_timeout = absl::ZeroDuration();  // Zero: none.
  bool fail_on_worker_loss = false;  // Else wait for a replacement.
  // Shard 0 says when a rank is slower than the others' median by this
  // fraction of a step (StragglerWatch); 0: never.
  double straggler_fraction = 0.2;
  SumOrder sum_order = SumOrder::kArrival;
  // Threads that split a chunk's sums and optimizer step (--server_threads).
  int server_threads = 1;
  // 2: a standby follows this shard (ReplicationSource); answers wait until
  // it holds their version.
  int replicas = 1;
  // Not empty: this server is the standby of the primary there
  // (FollowPrimary) and takes over when it is lost.
  std::string standby_of;
  absl::Duration failover_timeout = absl::Seconds(1);
  absl::Duration standby_timeout = absl::Seconds(5);
};

// Daemon wires parts that each have one job and their own tests:
// GrpcEndpoint (security, the bind, health), ShardRestorer (the state to
// start from), Checkpointer (checkpoints by the clock, on request and at
// the end), WeightsFileWriter (--weights_file) and JobWatchdog (step
// timeouts, lost workers, the job's end). Daemon itself runs the ticks,
// the drain and the order of the end.
class Daemon final {
 public:
  explicit Daemon(DaemonOptions options);
  ~Daemon();

  int Run();
  // Asks Run() to drain and return (signal-safe callers use a thread).
  void Stop() { stop_.Notify(); }

 private:
  using Saved = ParameterServerService::Saved;

  // One pass of the periodic duties; returns an exit code to stop with.
  std::optional<int> Tick(absl::Time now);
  // Run's parts: the telemetry, the core and the parts over them; what
  // lockstep_ctl checkpoint runs (null when there is nothing to save); the
  // "listening" line and the port file (false when that cannot be
  // written); the worker count of --workers=auto; the restore of the
  // starting state; the ticks until a stop (drained) or Tick's exit code.
  absl::Status CreateCore();
  std::function<absl::StatusOr<Saved>()> SaveOnRequest();
  bool AnnounceListening(int port);
  bool WritePortFile(int port);
  // --workers=auto: the count and the port, from LearnWorkerCount; false
  // when the server is to exit (`exit_code` says with what).
  bool LearnWorkers(const ServerSecurity& security, int* exit_code);
  absl::Status RestoreState();
  // --standby_of: follows the primary; OK once this server has taken over
  // (its state restored), else the exit code to end with.
  // `port` is the one it listens on; `service` refuses registrations while
  // the primary answers.
  std::optional<int> FollowAsStandby(int port, ParameterServerService* service);
  int ServeUntilDone(absl::FunctionRef<void(bool)> set_serving);

  // Run() sets workers (and listen's port) for --workers=auto.
  DaemonOptions options_;
  absl::Notification stop_;
  std::unique_ptr<WorkPool> pool_;  // Outlives core_.
  std::unique_ptr<ParameterServer> core_;
  // After core_: destroyed first, so no scrape reads a destroyed core.
  std::unique_ptr<ServerTelemetry> telemetry_;
  std::unique_ptr<CheckpointStore> store_;      // Null: no checkpoint_dir.
  std::unique_ptr<Checkpointer> checkpointer_;  // Null: no checkpoint_dir.
  std::unique_ptr<WeightsFileWriter> weights_;  // Null: no weights_file.
  // Coordinator calls, worker contact for the watchdog.
  ContactClock coordinator_contact_;
  std::unique_ptr<JobWatchdog> watchdog_;
  std::unique_ptr<StragglerWatch> stragglers_;
  // --replicas=2: the standby's source (after core_, destroyed first).
  std::unique_ptr<ReplicationSource> replication_;
};

}  // namespace lockstep

#endif  // LOCKSTEP_SERVER_DAEMON_DAEMON_H_
