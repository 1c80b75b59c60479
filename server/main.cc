// lockstep_server: one parameter-server shard.
#include <grpcpp/grpcpp.h>
#include <pthread.h>
#include <signal.h>

#include <cstdio>
#include <cstdlib>
#include <memory>
#include <string>
#include <thread>

#include "absl/flags/flag.h"
#include "absl/flags/parse.h"
#include "absl/flags/usage.h"
#include "absl/status/statusor.h"
#include "absl/strings/numbers.h"
#include "absl/strings/str_cat.h"
#include "absl/synchronization/notification.h"
#include "absl/time/clock.h"
#include "common/json_writer.h"
#include "common/status_macros.h"
#include "common/tf_config.h"
#include "server/coordination_service.h"
#include "server/coordination_store.h"
#include "server/grpc_service.h"
#include "server/parameter_server.h"

ABSL_FLAG(std::string, listen, "",
          "Address to listen on, host:port (port 0 picks a free one). "
          "Default: this task's entry in TF_CONFIG's ps list (on all "
          "interfaces), else 127.0.0.1:50051.");
ABSL_FLAG(int, workers, 0,
          "Workers taking part in every synchronous step. Default: the "
          "chief + worker count in TF_CONFIG.");
ABSL_FLAG(int, shard, -1,
          "This server's shard index. Default: TF_CONFIG's task index, else "
          "0.");
ABSL_FLAG(int, num_shards, 0,
          "Number of server shards in the job. Default: the length of "
          "TF_CONFIG's ps list, else 1.");
ABSL_FLAG(std::string, port_file, "",
          "If set, the bound port is written here (atomically) once the "
          "server listens; launchers use it with --listen=HOST:0.");
ABSL_FLAG(bool, exit_when_done, true,
          "Exit with status 0 once every worker has left the job.");
ABSL_FLAG(int, max_message_mb, 64,
          "Largest gRPC message accepted, in MiB (must exceed the chunk "
          "size).");

namespace lockstep {
namespace {

struct ServerMainOptions {
  std::string listen;
  int workers = 0;
  int shard = -1;
  int num_shards = 0;
  std::string port_file;
  bool exit_when_done = true;
  int max_message_bytes = 0;
};

// Exit codes shared with the worker: 2 for bad flags or configuration.
constexpr int kExitUsage = 2;

absl::StatusOr<ServerMainOptions> ParseOptions() {
  ServerMainOptions options;
  options.listen = absl::GetFlag(FLAGS_listen);
  options.workers = absl::GetFlag(FLAGS_workers);
  options.shard = absl::GetFlag(FLAGS_shard);
  options.num_shards = absl::GetFlag(FLAGS_num_shards);
  options.port_file = absl::GetFlag(FLAGS_port_file);
  options.exit_when_done = absl::GetFlag(FLAGS_exit_when_done);
  if (const char* env = std::getenv("TF_CONFIG"); env != nullptr && *env) {
    ASSIGN_OR_RETURN(TfConfig tf, ParseTfConfig(env));
    if (tf.task_type != "ps") {
      return absl::InvalidArgumentError(absl::StrCat(
          "TF_CONFIG says this task is a ", tf.task_type,
          "; lockstep_server runs ps tasks"));
    }
    if (options.listen.empty()) {
      const std::string& own = tf.PsAddresses()[tf.task_index];
      const size_t colon = own.rfind(':');
      if (colon == std::string::npos) {
        return absl::InvalidArgumentError(
            absl::StrCat("TF_CONFIG ps address \"", own, "\" has no port"));
      }
      options.listen = absl::StrCat("0.0.0.0", own.substr(colon));
    }
    if (options.workers == 0) options.workers = tf.NumWorkers();
    if (options.shard < 0) options.shard = tf.task_index;
    if (options.num_shards == 0) {
      options.num_shards = static_cast<int>(tf.PsAddresses().size());
    }
  }
  if (options.shard < 0) options.shard = 0;
  if (options.num_shards == 0) options.num_shards = 1;
  if (options.shard >= options.num_shards) {
    return absl::InvalidArgumentError(absl::StrCat(
        "--shard must be in [0, ", options.num_shards, "), got ",
        options.shard));
  }
  if (options.listen.empty()) options.listen = "127.0.0.1:50051";
  if (options.workers < 1) {
    return absl::InvalidArgumentError(
        "--workers must be at least 1 (or come from TF_CONFIG)");
  }
  const int mb = absl::GetFlag(FLAGS_max_message_mb);
  if (mb < 1 || mb > 1024) {
    return absl::InvalidArgumentError("--max_message_mb must be in [1, 1024]");
  }
  options.max_message_bytes = mb << 20;
  return options;
}

// Blocks SIGINT and SIGTERM in every thread (gRPC's included, which start
// later and inherit the mask) and turns them into a notification.
void HandleSignals(absl::Notification* stop) {
  sigset_t set;
  sigemptyset(&set);
  sigaddset(&set, SIGINT);
  sigaddset(&set, SIGTERM);
  pthread_sigmask(SIG_BLOCK, &set, nullptr);
  std::thread([set, stop]() {
    int sig = 0;
    sigwait(&set, &sig);
    std::fprintf(stderr, "lockstep_server: got signal %d, shutting down\n",
                 sig);
    stop->Notify();
  }).detach();
}

int Run(const ServerMainOptions& options) {
  absl::Notification stop;
  HandleSignals(&stop);

  ParameterServerOptions core_options;
  core_options.num_workers = options.workers;
  core_options.shard = options.shard;
  core_options.num_shards = options.num_shards;
  absl::StatusOr<std::unique_ptr<ParameterServer>> core =
      ParameterServer::Create(core_options);
  if (!core.ok()) {
    std::fprintf(stderr, "lockstep_server: %s\n",
                 core.status().ToString().c_str());
    return kExitUsage;
  }
  ParameterServerService service(core->get());
  // Rendezvous for --sync=allreduce workers (worker/allreduce).
  CoordinationStore coordination_store;
  CoordinatorService coordinator(&coordination_store);

  grpc::ServerBuilder builder;
  int port = 0;
  builder.AddListeningPort(options.listen, grpc::InsecureServerCredentials(),
                           &port);
  builder.SetMaxReceiveMessageSize(options.max_message_bytes);
  builder.SetMaxSendMessageSize(options.max_message_bytes);
  builder.RegisterService(&service);
  builder.RegisterService(&coordinator);
  std::unique_ptr<grpc::Server> server = builder.BuildAndStart();
  if (server == nullptr || port == 0) {
    std::fprintf(stderr, "lockstep_server: cannot listen on %s\n",
                 options.listen.c_str());
    return kExitUsage;
  }
  const std::string host =
      options.listen.substr(0, options.listen.rfind(':'));
  std::fprintf(stderr,
               "lockstep_server: shard %d of %d listening on %s:%d for %d "
               "worker(s)\n",
               options.shard, options.num_shards, host.c_str(), port,
               options.workers);
  if (!options.port_file.empty()) {
    absl::Status s =
        WriteFileAtomically(options.port_file, absl::StrCat(port, "\n"));
    if (!s.ok()) {
      std::fprintf(stderr, "lockstep_server: %s\n", s.ToString().c_str());
      return kExitUsage;
    }
  }

  const absl::Time start = absl::Now();
  while (!stop.HasBeenNotified()) {
    if (options.exit_when_done &&
        (*core)->WaitUntilDone(absl::Milliseconds(200))) {
      std::fprintf(stderr, "lockstep_server: every worker has left\n");
      break;
    }
    if (!options.exit_when_done) {
      stop.WaitForNotificationWithTimeout(absl::Milliseconds(200));
    }
  }
  const ServerStatus status = (*core)->GetStatus();
  std::fprintf(stderr,
               "lockstep_server: final version %lld after %.1f s; exiting\n",
               static_cast<long long>(status.version),
               absl::ToDoubleSeconds(absl::Now() - start));
  (*core)->Shutdown();
  server->Shutdown(std::chrono::system_clock::now() + std::chrono::seconds(5));
  return 0;
}

}  // namespace
}  // namespace lockstep

int main(int argc, char** argv) {
  absl::SetProgramUsageMessage(
      "Lockstep parameter-server shard: keeps the master weights, waits "
      "every step until all workers pushed their gradients, averages them, "
      "applies the optimizer and answers with the new weights.\n"
      "Usage: lockstep_server --listen=HOST:PORT --workers=N");
  absl::ParseCommandLine(argc, argv);
  absl::StatusOr<lockstep::ServerMainOptions> options =
      lockstep::ParseOptions();
  if (!options.ok()) {
    std::fprintf(stderr, "lockstep_server: %s\n",
                 std::string(options.status().message()).c_str());
    return lockstep::kExitUsage;
  }
  return lockstep::Run(*options);
}
