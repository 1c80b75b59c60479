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
#include <utility>

#include "absl/base/thread_annotations.h"
#include "absl/functional/function_ref.h"
#include "absl/synchronization/mutex.h"
#include "absl/synchronization/notification.h"
#include "absl/time/time.h"
#include "common/base/env.h"
#include "common/base/exit_codes.h"
#include "common/base/work_pool.h"
#include "common/security/grpc_limits.h"
#include "common/security/tls_options.h"
#include "server/core/checkpoint.h"
#include "server/core/parameter_server.h"
#include "server/daemon/server_telemetry.h"
#include "server/rpc/grpc_service.h"

namespace lockstep {

struct DaemonOptions {
  std::string listen;
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
  ServerLimits limits;  // Streams, keepalive, connection idle and age.
  TlsOptions tls;       // Credentials and who may call what.
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
  SumOrder sum_order = SumOrder::kArrival;
  // Threads that split a chunk's sums and optimizer step (--server_threads).
  int server_threads = 1;
};

class Daemon final {
 public:
  explicit Daemon(DaemonOptions options);
  ~Daemon();

  int Run();
  // Asks Run() to drain and return (signal-safe callers use a thread).
  void Stop() { stop_.Notify(); }

 private:
  // Writes the model's weights to options_.weights_file; returns their
  // version.
  absl::StatusOr<int64_t> WriteWeightsFile() ABSL_LOCKS_EXCLUDED(weights_mu_);
  // Writes a checkpoint now; returns its path and version.
  // Waits up to `wait` for the chunks to line up at one version.
  absl::StatusOr<std::pair<std::string, int64_t>> SaveCheckpoint(
      absl::Duration wait = absl::Seconds(30));
  using Saved = ParameterServerService::Saved;

  // One pass of the periodic duties; returns an exit code to stop with.
  std::optional<int> Tick(absl::Time now);
  // Tick's parts: the step-timeout watchdog (the exit code when a lost
  // worker fails the job), the periodic checkpoint, and the job's end once
  // every worker has left (exit_when_done).
  std::optional<int> CheckStepTimeouts(absl::Time now);
  void CheckpointIfDue(absl::Time now);
  std::optional<int> FinishIfDone();
  // Run's parts: the telemetry, the core and the checkpoint store; what
  // lockstep_ctl checkpoint runs (null when there is nothing to save); the
  // "listening" line and the port file (false when that cannot be
  // written); the ticks until a stop (drained) or Tick's exit code.
  absl::Status CreateCore();
  std::function<absl::StatusOr<Saved>()> SaveOnRequest();
  bool AnnounceListening(int port);
  int ServeUntilDone(absl::FunctionRef<void(bool)> set_serving);
  // A checkpoint of the newest version when it is not saved yet (OK when
  // there is nothing to save or no checkpoint_dir).
  absl::Status SaveUnsavedProgress();
  // Tick's check that the job still has workers (no_worker_timeout): the
  // exit code when it has given up on them.
  std::optional<int> CheckWorkersGone(absl::Time now);
  // Restores the newest intact checkpoint in checkpoint_dir, if any, else
  // the one init_from names.
  absl::Status RestoreNewestCheckpoint();
  // Restores init_from's checkpoint (OK when init_from is empty).
  absl::Status RestoreInitFrom();

  const DaemonOptions options_;
  absl::Notification stop_;
  std::unique_ptr<WorkPool> pool_;  // Outlives core_.
  std::unique_ptr<ParameterServer> core_;
  // After core_: destroyed first, so no scrape reads a destroyed core.
  std::unique_ptr<ServerTelemetry> telemetry_;
  std::unique_ptr<CheckpointStore> checkpoints_;
  // One weights-file write at a time (job end, lockstep_ctl requests).
  absl::Mutex weights_mu_;
  absl::Mutex checkpoint_mu_;  // One checkpoint write at a time.
  int64_t last_saved_version_ ABSL_GUARDED_BY(checkpoint_mu_) = -1;
  absl::Time last_saved_ ABSL_GUARDED_BY(checkpoint_mu_) = absl::Now();
  // Periodic checkpoints after a failed one: 5 s, doubling to 5 min, until
  // one (periodic or asked for) succeeds.
  absl::Duration checkpoint_backoff_ ABSL_GUARDED_BY(checkpoint_mu_);
  absl::Time retry_checkpoint_at_ ABSL_GUARDED_BY(checkpoint_mu_) =
      absl::InfinitePast();
};

}  // namespace lockstep

#endif  // LOCKSTEP_SERVER_DAEMON_DAEMON_H_
