#include "server/daemon/server_main.h"

#include <grpcpp/grpcpp.h>
#include <pthread.h>
#include <signal.h>
#include <unistd.h>

#include <cstdio>
#include <cstdlib>
#include <functional>
#include <string>
#include <thread>
#include <vector>

#include "absl/flags/flag.h"
#include "absl/flags/usage.h"
#include "absl/status/statusor.h"
#include "absl/strings/numbers.h"
#include "absl/strings/str_cat.h"
#include "absl/strings/str_replace.h"
#include "common/base/machine_memory.h"
#include "common/base/malloc_tuning.h"
#include "common/base/status_macros.h"
#include "common/base/work_pool.h"
#include "common/flags/flags.h"
#include "common/formats/tf_config.h"
#include "common/optim/sum_order.h"
#include "common/security/tls.h"
#include "common/security/tls_flags.h"
#include "server/daemon/daemon.h"
#include "server/daemon/grpc_endpoint.h"
#include "server/daemon/replication_flags.h"
#include "server/daemon/telemetry_flags.h"

ABSL_FLAG(std::string, listen, "",
          "Address to listen on, host:port (port 0 picks a free one). "
          "Default: this task's entry in TF_CONFIG's ps list (on all "
          "interfaces, or on loopback for a loopback entry), else "
          "127.0.0.1:50051. A non-loopback address needs TLS or --insecure.");
ABSL_FLAG(std::string, workers, "",
          "Workers in every synchronous step, or auto: the count the first "
          "worker to call gives (Kubernetes runtimes: the servers are not "
          "told numNodes). Default: TF_CONFIG's chief + worker count.");
ABSL_FLAG(int, shard, -1,
          "This server's shard index. Default: TF_CONFIG's task index, or 0.");
ABSL_FLAG(int, num_shards, 0,
          "Server shards in the job. Default: TF_CONFIG's ps count, or 1.");
ABSL_FLAG(std::string, port_file, "",
          "If set, the bound port is written here (atomically) once the "
          "server listens; launchers use it with --listen=HOST:0.");
ABSL_FLAG(bool, exit_when_done, true,
          "Exit with status 0 once every worker has left the job.");
ABSL_FLAG(std::string, checkpoint_dir, "",
          "Folder for this shard's checkpoints (a sub-folder per shard). On "
          "start the newest intact one is restored. Empty: no checkpoints.");
ABSL_FLAG(std::string, init_from, "",
          "Start a new job from this checkpoint when --checkpoint_dir holds "
          "none: another job's --checkpoint_dir or file (docs/resume.md).");
ABSL_FLAG(std::string, weights_file, "",
          "Write the model here as a safetensors file keyed by tensor name "
          "(parameters, then batch-norm state) when every worker has left, "
          "and on request (lockstep_ctl checkpoint). One shard only: with "
          "several, each holds part of the model, and a worker writes it "
          "(lockstep_worker --dump_weights).");
ABSL_FLAG(int64_t, checkpoint_every_steps, 0,
          "Write a checkpoint every N versions (0: not by steps).");
ABSL_FLAG(int, checkpoint_every_seconds, 0,
          "Write a checkpoint every N seconds (0: not by time).");
ABSL_FLAG(int, checkpoints_to_keep, 3, "How many checkpoints to keep.");
ABSL_FLAG(int, no_worker_timeout_s, 600,
          "Once the job has begun: exit 75 (retryable) after this many "
          "seconds without a call from any worker while the job is "
          "unfinished, every worker lost and none replaced (0: never). The "
          "unsaved progress is checkpointed first.");
ABSL_FLAG(bool, allow_fresh_start, false,
          "Start from version 0 even when --checkpoint_dir holds only damaged "
          "checkpoints (set aside as *.corrupt); without it the server "
          "refuses (exit 2) rather than silently lose the job's progress.");
ABSL_FLAG(int, step_timeout_s, 300,
          "A synchronous step that still misses workers after this many "
          "seconds is given up (not applied) and the missing workers are "
          "evicted; a warning comes at half of it. In SSP mode a rank the "
          "others have waited for this long is evicted, and waited for again "
          "once it has rejoined and caught up. 0: wait forever.");
ABSL_FLAG(std::string, on_worker_loss, "wait",
          "After a step timeout: wait (for a replacement worker to register "
          "and push) or fail (exit with the retryable code 75).");
ABSL_FLAG(std::string, sum_order,
          std::string(lockstep::SumOrderName(lockstep::SumOrder::kArrival)),
          "How a synchronous step sums its workers' gradients: arrival (each "
          "as it comes, one buffer per chunk) or rank (ascending rank, so "
          "that runs with three or more workers give the same bits every "
          "time, a run recovered from a fault included; holds up to W - 1 "
          "copies of a chunk's payload that arrived early).");
ABSL_FLAG(int, server_threads, 0,
          "Threads that split each chunk's sums and optimizer step, so that "
          "one shard can use every core it may run on (the same bits with "
          "any count). 0: the cores this process may use.");
ABSL_FLAG(int, max_message_mb, 64,
          "Largest gRPC reply sent, in MiB (replies carry at most a chunk). "
          "What is received follows --max_chunk_bytes.");
ABSL_FLAG(int64_t, max_chunk_bytes, lockstep::kDefaultChunkBytes,
          "Largest chunk a worker may register (its --chunk_bytes). "
          "Requests larger than this plus 64 KiB are refused (gRPC 1.51 "
          "receives them first; --max_grpc_memory_mb bounds that).");
ABSL_FLAG(int64_t, max_parameters, int64_t{1} << 30,
          "Largest model a worker may register, in fp32 parameters and "
          "batch-norm state values together (at most 2^40).");
ABSL_FLAG(int64_t, max_state_mb, 0,
          "Most memory, in MiB, the model's state on this shard may take "
          "(weights, their sum, a copy, the optimizer's slots); a larger "
          "model is refused at registration (RESOURCE_EXHAUSTED) before "
          "anything is allocated. 0: three quarters of the machine's memory "
          "(or of the cgroup's limit, where lower).");
ABSL_FLAG(int, max_grpc_memory_mb, 1024,
          "gRPC's memory quota for buffering requests, in MiB: past it gRPC "
          "cancels calls rather than grow. Must hold every worker's pushes "
          "of a step (about workers x model bytes / shards). 0: no quota.");
ABSL_FLAG(int, max_concurrent_streams, 1024,
          "Concurrent calls per client connection.");
ABSL_FLAG(int, max_connection_idle_s, 600,
          "Close client connections without calls for this long (0: never).");
ABSL_FLAG(int, max_connection_age_s, 3600,
          "Close every client connection after about this long, so clients "
          "reconnect (and pick up rotated certificates); calls in flight get "
          "--step_timeout_s + 30 s to finish (0: never).");

namespace lockstep {
namespace {

// The address, workers and shard that --listen, --workers, --shard and
// --num_shards leave unset, from TF_CONFIG's ps task `env`.
absl::Status ApplyTfConfig(const char* env, DaemonOptions* options_out) {
  DaemonOptions& options = *options_out;
  ASSIGN_OR_RETURN(TfConfig tf, ParseTfConfig(env));
  if (tf.task_type != "ps") {
    return absl::InvalidArgumentError(
        absl::StrCat("TF_CONFIG says this task is a ", tf.task_type,
                     "; lockstep_server runs ps tasks"));
  }
  if (options.listen.empty()) {
    const std::string own = tf.PsAddresses()[tf.task_index];
    const size_t colon = own.rfind(':');
    if (colon == std::string::npos) {
      return absl::InvalidArgumentError(
          absl::StrCat("TF_CONFIG ps address \"", own, "\" has no port"));
    }
    // All interfaces, unless the cluster reaches this task on loopback
    // (then plaintext needs no --insecure).
    options.listen = lockstep::IsLoopbackAddress(own)
                         ? own
                         : absl::StrCat("0.0.0.0", own.substr(colon));
  }
  if (options.workers == 0) options.workers = tf.NumWorkers();
  if (options.shard < 0) options.shard = tf.task_index;
  if (options.num_shards == 0) {
    options.num_shards = static_cast<int>(tf.PsAddresses().size());
  }
  return absl::OkStatus();
}

// The job's shape and this shard's place in it (flags, else TF_CONFIG).
absl::Status ParseTopology(DaemonOptions* options_out) {
  DaemonOptions& options = *options_out;
  options.listen = absl::GetFlag(FLAGS_listen);
  const std::string workers = absl::GetFlag(FLAGS_workers);
  const bool auto_workers = workers == "auto";  // Daemon::LearnWorkers
  options.workers = 0;
  if (!workers.empty() && !auto_workers &&
      !absl::SimpleAtoi(workers, &options.workers)) {
    options.workers = -1;
  }
  options.shard = absl::GetFlag(FLAGS_shard);
  options.num_shards = absl::GetFlag(FLAGS_num_shards);
  options.port_file = absl::GetFlag(FLAGS_port_file);
  options.exit_when_done = absl::GetFlag(FLAGS_exit_when_done);
  if (const char* env = std::getenv("TF_CONFIG"); env != nullptr && *env) {
    RETURN_IF_ERROR(ApplyTfConfig(env, &options));
  }
  if (options.shard < 0) options.shard = 0;
  if (options.num_shards == 0) options.num_shards = 1;
  if (options.shard >= options.num_shards) {
    return absl::InvalidArgumentError(absl::StrCat("--shard must be in [0, ",
                                                   options.num_shards,
                                                   "), got ", options.shard));
  }
  if (options.listen.empty()) options.listen = "127.0.0.1:50051";
  RETURN_IF_ERROR(CheckListenAddress("--listen", options.listen));
  if (auto_workers) {
    options.workers = 0;
  } else if (options.workers < 1) {
    return absl::InvalidArgumentError(
        absl::StrCat("--workers takes a count of at least 1 or auto, got \"",
                     workers, "\""));
  }
  return absl::OkStatus();
}

// What one request, one model and one connection may take.
absl::Status ParseLimits(DaemonOptions* options_out) {
  DaemonOptions& options = *options_out;
  const int mb = absl::GetFlag(FLAGS_max_message_mb);
  if (mb < 1 || mb > 1024) {
    return absl::InvalidArgumentError("--max_message_mb must be in [1, 1024]");
  }
  options.max_message_bytes = mb << 20;
  options.max_chunk_bytes = absl::GetFlag(FLAGS_max_chunk_bytes);
  if (options.max_chunk_bytes < 4 || options.max_chunk_bytes > (1 << 30)) {
    return absl::InvalidArgumentError("--max_chunk_bytes must be in [4, 2^30]");
  }
  options.max_parameters = absl::GetFlag(FLAGS_max_parameters);
  // At most 2^40 (4 TiB of weights): the limit checks add to it.
  if (options.max_parameters < 1 ||
      options.max_parameters > (int64_t{1} << 40)) {
    return absl::InvalidArgumentError("--max_parameters must be in [1, 2^40]");
  }
  options.limits.max_concurrent_streams =
      absl::GetFlag(FLAGS_max_concurrent_streams);
  const int idle = absl::GetFlag(FLAGS_max_connection_idle_s);
  const int age = absl::GetFlag(FLAGS_max_connection_age_s);
  if (options.limits.max_concurrent_streams < 1 || idle < 0 || age < 0) {
    return absl::InvalidArgumentError(
        "--max_concurrent_streams must be positive and connection times not "
        "negative");
  }
  const int64_t state_mb = absl::GetFlag(FLAGS_max_state_mb);
  if (state_mb < 0) {
    return absl::InvalidArgumentError("--max_state_mb must not be negative");
  }
  options.max_state_bytes =
      state_mb > 0 ? state_mb << 20 : MachineMemoryBytes() / 4 * 3;
  const int memory_mb = absl::GetFlag(FLAGS_max_grpc_memory_mb);
  if (memory_mb < 0) {
    return absl::InvalidArgumentError(
        "--max_grpc_memory_mb must not be negative");
  }
  options.limits.max_memory_bytes = int64_t{memory_mb} << 20;
  options.limits.max_connection_idle = absl::Seconds(idle);
  options.limits.max_connection_age = absl::Seconds(age);
  return absl::OkStatus();
}

// Checkpoints, the weights file, and the wait for workers that are gone.
absl::Status ParseCheckpoints(DaemonOptions* options_out) {
  DaemonOptions& options = *options_out;
  options.checkpoint_dir = absl::GetFlag(FLAGS_checkpoint_dir);
  options.init_from = absl::GetFlag(FLAGS_init_from);
  options.weights_file = absl::GetFlag(FLAGS_weights_file);
  if (!options.weights_file.empty() && options.num_shards > 1) {
    return absl::InvalidArgumentError(absl::StrCat(
        "--weights_file needs the whole model on one shard, and this job has ",
        options.num_shards,
        "; write it from a worker instead (lockstep_worker "
        "--dump_weights=PATH.safetensors, or the Python package's "
        "save_safetensors)"));
  }
  options.checkpoint_every_steps = absl::GetFlag(FLAGS_checkpoint_every_steps);
  options.checkpoint_every =
      absl::Seconds(absl::GetFlag(FLAGS_checkpoint_every_seconds));
  options.checkpoints_to_keep = absl::GetFlag(FLAGS_checkpoints_to_keep);
  options.allow_fresh_start = absl::GetFlag(FLAGS_allow_fresh_start);
  if (options.checkpoint_every_steps < 0 ||
      options.checkpoint_every < absl::ZeroDuration() ||
      options.checkpoints_to_keep < 1) {
    return absl::InvalidArgumentError(
        "checkpoint intervals must not be negative and at least one "
        "checkpoint is kept");
  }
  if (absl::GetFlag(FLAGS_no_worker_timeout_s) < 0) {
    return absl::InvalidArgumentError(
        absl::StrCat("--no_worker_timeout_s must be >= 0, got ",
                     absl::GetFlag(FLAGS_no_worker_timeout_s)));
  }
  options.no_worker_timeout =
      absl::Seconds(absl::GetFlag(FLAGS_no_worker_timeout_s));
  return absl::OkStatus();
}

// The step timeout, what a lost worker does, sum order, server threads.
absl::Status ParseStepRules(DaemonOptions* options_out) {
  DaemonOptions& options = *options_out;
  const int timeout = absl::GetFlag(FLAGS_step_timeout_s);
  if (timeout < 0) {
    return absl::InvalidArgumentError("--step_timeout_s must not be negative");
  }
  options.step_timeout = absl::Seconds(timeout);
  // A push may wait a whole step at the barrier: let it finish when its
  // connection reaches its maximum age.
  options.limits.max_connection_age_grace =
      timeout > 0 ? absl::Seconds(timeout + 30) : absl::Minutes(10);
  const std::string loss = absl::GetFlag(FLAGS_on_worker_loss);
  if (loss != "wait" && loss != "fail") {
    return absl::InvalidArgumentError(absl::StrCat(
        "--on_worker_loss must be wait or fail, got \"", loss, "\""));
  }
  options.fail_on_worker_loss = loss == "fail";
  absl::StatusOr<SumOrder> order =
      ParseSumOrder(absl::GetFlag(FLAGS_sum_order));
  if (!order.ok()) {
    return absl::InvalidArgumentError(
        absl::StrCat("--sum_order ", order.status().message()));
  }
  options.sum_order = *order;
  const int threads = absl::GetFlag(FLAGS_server_threads);
  if (threads < 0 || threads > 1024) {
    return absl::InvalidArgumentError(
        absl::StrCat("--server_threads must be in [0, 1024], got ", threads));
  }
  options.server_threads = threads == 0 ? WorkPool::AvailableCores() : threads;
  return absl::OkStatus();
}

absl::StatusOr<DaemonOptions> ParseOptions() {
  DaemonOptions options;
  RETURN_IF_ERROR(ParseTopology(&options));
  RETURN_IF_ERROR(ParseLimits(&options));
  ASSIGN_OR_RETURN(options.tls, lockstep::TlsOptionsFromFlags());
  RETURN_IF_ERROR(ParseCheckpoints(&options));
  RETURN_IF_ERROR(ParseTelemetry(&options));
  RETURN_IF_ERROR(ParseStepRules(&options));
  RETURN_IF_ERROR(ParseReplication(&options));
  return options;
}

// Blocks SIGINT and SIGTERM in every thread (gRPC's included, which start
// later and inherit the mask) and turns them into Daemon::Stop().
void HandleSignals(Daemon* daemon) {
  sigset_t set;
  sigemptyset(&set);
  sigaddset(&set, SIGINT);
  sigaddset(&set, SIGTERM);
  pthread_sigmask(SIG_BLOCK, &set, nullptr);
  std::thread([set, daemon]() {
    int sig = 0;
    sigwait(&set, &sig);
    std::fprintf(stderr, "lockstep_server: got signal %d, draining\n", sig);
    daemon->Stop();
  }).detach();
}

}  // namespace

int ServerMain(int argc, char** argv, std::vector<std::string> help_files,
               const std::function<void(DaemonOptions*)>& adjust) {
  TuneMallocForSteps();
  absl::SetProgramUsageMessage(
      "Lockstep parameter-server shard: keeps the master weights, waits "
      "every step until all workers pushed their gradients, averages them, "
      "applies the optimizer and answers with the new weights.\n"
      "Usage: lockstep_server --listen=HOST:PORT --workers=N\n"
      "Exit codes: 0 done, 2 bad flags or checkpoint (permanent), 75 a lost "
      "worker with --on_worker_loss=fail (retryable), 1 other failures.");
  help_files.push_back("server/daemon/server_main.cc");
  help_files.push_back("server/daemon/replication_flags.cc");
  help_files.push_back("server/daemon/telemetry_flags.cc");
  help_files.push_back("common/security/tls_flags.cc");
  help_files.push_back("common/security/tls_server_flags.cc");
  ParseFlags(argc, argv, help_files);
  absl::StatusOr<DaemonOptions> options = ParseOptions();
  if (!options.ok()) {
    std::fprintf(stderr, "lockstep_server: %s\n",
                 std::string(options.status().message()).c_str());
    return kExitPermanent;
  }
  if (ValidateOnly()) return kExitOk;
  if (adjust) adjust(&*options);
  Daemon daemon(*std::move(options));
  HandleSignals(&daemon);
  return daemon.Run();
}

}  // namespace lockstep
