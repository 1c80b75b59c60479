#include "server/daemon/daemon.h"

#include <grpc/support/log.h>
#include <grpcpp/grpcpp.h>
#include <grpcpp/health_check_service_interface.h>

#include <algorithm>
#include <cstdio>
#include <cstdlib>
#include <string>
#include <tuple>
#include <utility>
#include <vector>

#include "absl/cleanup/cleanup.h"
#include "absl/functional/function_ref.h"
#include "absl/strings/ascii.h"
#include "absl/strings/str_cat.h"
#include "absl/strings/str_join.h"
#include "absl/time/clock.h"
#include "common/base/status_macros.h"
#include "common/formats/json_writer.h"
#include "common/formats/safetensors.h"
#include "common/model/signature_limits.h"
#include "common/security/authorizer.h"
#include "common/security/grpc_limits.h"
#include "common/security/tls.h"
#include "server/coordination/coordination_service.h"
#include "server/coordination/coordination_store.h"
#include "server/daemon/daemon_internal.h"
#include "server/rpc/grpc_service.h"

namespace lockstep {
namespace {

using daemon_internal::kDrainCheckpointWait;
using daemon_internal::Log;

// How often the daemon looks at timeouts, checkpoints and the job's end.
constexpr absl::Duration kTick = absl::Milliseconds(50);
// How long a finishing server waits for a watcher between two long polls.
constexpr absl::Duration kWatcherGrace = absl::Seconds(1);
// How long a server waits for its port to be let go of before giving up.
constexpr absl::Duration kPortWait = absl::Seconds(3);

// A predecessor killed a moment ago may still hold the port: waits up to
// kPortWait for it, saying so (the bind that follows reports the rest).
void WaitForPort(const std::string& address) {
  if (WaitForFreePort(address, absl::ZeroDuration())) return;
  Log(absl::StrCat(address, " is in use; waiting up to ",
                   absl::FormatDuration(kPortWait), " for it"));
  WaitForFreePort(address, kPortWait);
}

std::string Ranks(const std::vector<int>& ranks) {
  std::string out;
  for (int r : ranks) absl::StrAppend(&out, out.empty() ? "" : ",", r);
  return out;
}

// The server's credentials and who may call what, from --tls_* and
// --token_file; checked before any work so bad settings fail at once.
struct Security {
  std::shared_ptr<grpc::ServerCredentials> credentials;
  std::unique_ptr<Authorizer> authorizer;
};

SignatureLimits SignatureLimitsOf(const DaemonOptions& options) {
  SignatureLimits limits;
  limits.max_chunk_bytes = options.max_chunk_bytes;
  limits.max_parameters = options.max_parameters;
  return limits;
}

absl::StatusOr<Security> MakeSecurity(const DaemonOptions& options) {
  Security security;
  ASSIGN_OR_RETURN(security.credentials,
                   MakeServerCredentials(options.tls, options.listen));
  ASSIGN_OR_RETURN(security.authorizer, Authorizer::Create(options.tls));
  if (!options.tls.ServerTls() && !IsLoopbackAddress(options.listen)) {
    Log("warning: plaintext on a non-loopback address (--insecure): anyone "
        "on the network can read and write the model");
  } else if (options.tls.ServerTls() && options.tls.ca_file.empty() &&
             options.tls.token_file.empty()) {
    Log("warning: TLS without client certificates (--tls_ca) or "
        "--token_file: anyone who reaches the server may call every RPC");
  }
  return security;
}

// The log level gRPC takes from GRPC_VERBOSITY (ERROR when unset).
gpr_log_severity GrpcLogVerbosity() {
  const char* env = std::getenv("GRPC_VERBOSITY");
  const std::string level = absl::AsciiStrToUpper(env == nullptr ? "" : env);
  if (level == "DEBUG") return GPR_LOG_SEVERITY_DEBUG;
  if (level == "INFO") return GPR_LOG_SEVERITY_INFO;
  if (level == "NONE") {
    return static_cast<gpr_log_severity>(GPR_LOG_SEVERITY_ERROR + 1);
  }
  return GPR_LOG_SEVERITY_ERROR;
}

// Builds and starts `builder`'s server with gRPC's log off: a port that
// cannot be had makes gRPC log its internal error over several lines, and
// StartServer's own line says it clearly.
std::unique_ptr<grpc::Server> BuildQuietly(grpc::ServerBuilder* builder) {
  gpr_set_log_verbosity(
      static_cast<gpr_log_severity>(GPR_LOG_SEVERITY_ERROR + 1));
  std::unique_ptr<grpc::Server> server = builder->BuildAndStart();
  gpr_set_log_verbosity(GrpcLogVerbosity());
  return server;
}

// Listens on options.listen with `services`; null (said on stderr) when
// the port cannot be had. Sets *port to the port bound.
std::unique_ptr<grpc::Server> StartServer(
    const DaemonOptions& options,
    const std::shared_ptr<grpc::ServerCredentials>& credentials,
    const std::vector<grpc::Service*>& services, int* port) {
  grpc::EnableDefaultHealthCheckService(true);  // grpc.health.v1, for probes.
  WaitForPort(options.listen);
  grpc::ServerBuilder builder;
  builder.AddListeningPort(options.listen, credentials, port);
  builder.SetMaxReceiveMessageSize(MaxRequestBytes(options.max_chunk_bytes));
  builder.SetMaxSendMessageSize(options.max_message_bytes);
  ApplyServerLimits(options.limits, &builder);
  ListenExclusively(&builder);
  for (grpc::Service* service : services) builder.RegisterService(service);
  std::unique_ptr<grpc::Server> server = BuildQuietly(&builder);
  if (server == nullptr || *port == 0) {
    Log(absl::StrCat("cannot listen on ", options.listen,
                     " (is another process using the port?)"));
    return nullptr;
  }
  return server;
}

}  // namespace

Daemon::Daemon(DaemonOptions options) : options_(std::move(options)) {}
Daemon::~Daemon() = default;

std::optional<int> Daemon::CheckStepTimeouts(absl::Time now) {
  if (options_.step_timeout <= absl::ZeroDuration()) return std::nullopt;
  for (const ParameterServer::StepAlarm& alarm : core_->CheckStepTimeout(
           now, options_.step_timeout, options_.fail_on_worker_loss)) {
    if (!alarm.expired) {
      Log(absl::StrCat("warning: step ", alarm.step, " has waited ",
                       absl::FormatDuration(alarm.waited), " for rank(s) ",
                       Ranks(alarm.missing)));
      continue;
    }
    if (alarm.ssp && !options_.fail_on_worker_loss) {
      Log(absl::StrCat(
          "ssp: rank(s) ", Ranks(alarm.missing), " have not pushed step ",
          alarm.step, " in ", absl::FormatDuration(alarm.waited),
          "; the others, --staleness steps ahead, wait for them or a "
          "replacement for as long as their own --rejoin_timeout_s allows "
          "(--on_worker_loss=fail would end the job now)"));
      continue;
    }
    Log(absl::StrCat("step ", alarm.step, " timed out waiting for rank(s) ",
                     Ranks(alarm.missing), alarm.ssp ? "" : "; not applied",
                     options_.fail_on_worker_loss
                         ? "; failing the job (--on_worker_loss=fail)"
                         : "; waiting for a replacement"));
    if (options_.fail_on_worker_loss) {
      core_->Shutdown(absl::CancelledError(
          absl::StrCat("the job failed: rank(s) ", Ranks(alarm.missing),
                       " were lost (--on_worker_loss=fail)")));
      return kExitRetryable;
    }
  }
  return std::nullopt;
}

void Daemon::CheckpointIfDue(absl::Time now) {
  if (checkpoints_ == nullptr) return;
  const int64_t version = core_->GetStatus().version;
  {
    absl::MutexLock lock(&checkpoint_mu_);
    const bool due = version > last_saved_version_ &&
                     now >= retry_checkpoint_at_ &&
                     ((options_.checkpoint_every_steps > 0 &&
                       version - std::max<int64_t>(last_saved_version_, 0) >=
                           options_.checkpoint_every_steps) ||
                      (options_.checkpoint_every > absl::ZeroDuration() &&
                       now - last_saved_ >= options_.checkpoint_every));
    if (!due) return;
  }
  absl::StatusOr<std::pair<std::string, int64_t>> saved = SaveCheckpoint();
  if (saved.ok()) return;
  // Each try snapshots and encodes the whole shard: not every tick.
  absl::Duration backoff;
  {
    absl::MutexLock lock(&checkpoint_mu_);
    checkpoint_backoff_ = std::min(
        absl::Minutes(5), std::max(absl::Seconds(5), 2 * checkpoint_backoff_));
    retry_checkpoint_at_ = now + checkpoint_backoff_;
    backoff = checkpoint_backoff_;
  }
  Log(absl::StrCat("checkpoint failed: ", saved.status().ToString(),
                   "; next try in ", absl::FormatDuration(backoff)));
}

std::optional<int> Daemon::FinishIfDone() {
  if (!options_.exit_when_done || !core_->WaitUntilDone(absl::ZeroDuration())) {
    return std::nullopt;
  }
  Log("every worker has left");
  // The trained model is saved whatever the interval.
  if (absl::Status saved = SaveUnsavedProgress(); !saved.ok()) {
    Log(absl::StrCat("final checkpoint failed: ", saved.ToString()));
    return kExitFailure;
  }
  if (!options_.weights_file.empty()) {
    if (absl::StatusOr<int64_t> v = WriteWeightsFile(); !v.ok()) {
      Log(absl::StrCat("writing the weights file failed: ",
                       v.status().ToString()));
      return kExitFailure;
    }
  }
  return kExitOk;
}

std::optional<int> Daemon::Tick(absl::Time now) {
  if (std::optional<int> code = CheckStepTimeouts(now); code.has_value()) {
    return code;
  }
  CheckpointIfDue(now);
  if (std::optional<int> code = CheckWorkersGone(now); code.has_value()) {
    return code;
  }
  return FinishIfDone();
}

absl::Status Daemon::CreateCore() {
  ServerTelemetryOptions telemetry_options = options_.telemetry;
  telemetry_options.shard = options_.shard;
  telemetry_options.checkpoints = !options_.checkpoint_dir.empty();
  for (int port :
       {telemetry_options.health_port, telemetry_options.metrics_port}) {
    if (port > 0) WaitForPort(absl::StrCat("0.0.0.0:", port));
  }
  ASSIGN_OR_RETURN(telemetry_, ServerTelemetry::Create(telemetry_options));
  ParameterServerOptions core_options;
  core_options.num_workers = options_.workers;
  core_options.shard = options_.shard;
  core_options.num_shards = options_.num_shards;
  core_options.observer = telemetry_->observer();
  core_options.sum_order = options_.sum_order;
  core_options.max_state_bytes = options_.max_state_bytes;
  pool_ = std::make_unique<WorkPool>(options_.server_threads);
  core_options.pool = pool_.get();
  ASSIGN_OR_RETURN(core_, ParameterServer::Create(core_options));
  telemetry_->AttachCore(core_.get(), options_.workers);
  if (options_.checkpoint_dir.empty()) return absl::OkStatus();
  ASSIGN_OR_RETURN(checkpoints_,
                   CheckpointStore::Create(options_.checkpoint_dir,
                                           options_.shard, options_.num_shards,
                                           options_.checkpoints_to_keep,
                                           options_.checkpoint_env));
  return absl::OkStatus();
}

std::function<absl::StatusOr<Daemon::Saved>()> Daemon::SaveOnRequest() {
  // What lockstep_ctl checkpoint asks for: a checkpoint (with
  // --checkpoint_dir) and the weights file (with --weights_file).
  if (checkpoints_ == nullptr && options_.weights_file.empty()) return nullptr;
  return [this]() -> absl::StatusOr<Saved> {
    Saved saved;
    if (checkpoints_ != nullptr) {
      ASSIGN_OR_RETURN(std::tie(saved.checkpoint, saved.version),
                       SaveCheckpoint());
    }
    if (!options_.weights_file.empty()) {
      ASSIGN_OR_RETURN(saved.version, WriteWeightsFile());
      saved.weights_file = options_.weights_file;
    }
    return saved;
  };
}

bool Daemon::AnnounceListening(int port) {
  const std::string host =
      options_.listen.substr(0, options_.listen.rfind(':'));
  Log(absl::StrCat("shard ", options_.shard, " of ", options_.num_shards,
                   " listening on ", host, ":", port, " (",
                   DescribeServerSecurity(options_.tls), ") for ",
                   options_.workers, " worker(s)"));
  if (options_.port_file.empty()) return true;
  absl::Status s =
      WriteFileAtomically(options_.port_file, absl::StrCat(port, "\n"));
  if (!s.ok()) Log(s.ToString());
  return s.ok();
}

int Daemon::ServeUntilDone(absl::FunctionRef<void(bool)> set_serving) {
  while (true) {
    if (stop_.WaitForNotificationWithTimeout(kTick)) {
      // Drain: no new steps, but the step some chunks have closed and others
      // still gather may finish, so that the last checkpoint takes every
      // chunk at one version; then a clean exit.
      Log("stopping: no new steps are taken");
      set_serving(false);
      core_->StopNewSteps();
      if (checkpoints_ != nullptr) {
        absl::StatusOr<std::pair<std::string, int64_t>> saved =
            SaveCheckpoint(kDrainCheckpointWait);
        if (!saved.ok()) {
          Log(absl::StrCat("last checkpoint failed: ",
                           saved.status().ToString()));
        }
      }
      core_->Shutdown();
      return kExitOk;
    }
    if (std::optional<int> code = Tick(absl::Now())) return *code;
  }
}

int Daemon::Run() {
  absl::StatusOr<Security> security = MakeSecurity(options_);
  if (!security.ok()) {
    Log(std::string(security.status().message()));
    return kExitPermanent;
  }
  if (absl::Status created = CreateCore(); !created.ok()) {
    Log(created.ToString());
    return kExitPermanent;
  }
  ParameterServerService service(core_.get(), SaveOnRequest(),
                                 security->authorizer.get(),
                                 SignatureLimitsOf(options_));
  service.HoldRegistration();  // Until the checkpoint is restored (below).
  // Rendezvous for --sync=allreduce workers (worker/exchange/allreduce).
  CoordinationStore coordination_store;
  // An elastic PS job's worker group: its pushes carry their generation.
  GroupRendezvous groups([this](const std::string& group, int64_t generation) {
    if (group == kPsGroupName) core_->RequireGeneration(generation);
  });
  CoordinatorService coordinator(&coordination_store, &groups,
                                 security->authorizer.get());
  int port = 0;
  std::unique_ptr<grpc::Server> server = StartServer(
      options_, security->credentials, {&service, &coordinator}, &port);
  if (server == nullptr) return kExitPermanent;
  // However Run() ends, requested checkpoints are finished before the
  // server (and then the service) goes: runs before `server` is destroyed.
  absl::Cleanup stop_saving = [&]() { service.StopSaving(); };
  // NOT_SERVING while the checkpoint loads and while draining.
  auto set_serving = [&](bool serving) {
    server->GetHealthCheckService()->SetServingStatus(serving);
    telemetry_->SetServing(serving);
  };
  set_serving(false);
  // However Run() ends, held registrations are answered (the server's
  // shutdown waits for them).
  absl::Cleanup release_registrations = [&]() {
    core_->Shutdown();
    service.OpenRegistration();
  };
  if (!AnnounceListening(port)) return kExitPermanent;

  // Listening already: probes see NOT_SERVING rather than a closed port,
  // and GetStatus answers, while the newest checkpoint loads.
  if (!RestoreNewestCheckpoint().ok()) return kExitPermanent;
  service.OpenRegistration();
  set_serving(true);

  const absl::Time start = absl::Now();
  const int exit_code = ServeUntilDone(set_serving);
  Log(absl::StrCat("final version ", core_->GetStatus().version, " after ",
                   absl::FormatDuration(absl::Now() - start), "; exiting"));
  set_serving(false);  // Also when Tick ended the job.
  core_->Shutdown();
  service.AnswerStatusWaits(kWatcherGrace);  // The final status, to watchers.
  // A checkpoint being written on request ends first, so that the
  // server's 5 s below are not what it has left.
  service.StopSaving();
  server->Shutdown(absl::ToChronoTime(absl::Now() + absl::Seconds(5)));
  if (absl::Status s = telemetry_->FlushTrace(); !s.ok()) Log(s.ToString());
  return exit_code;
}

}  // namespace lockstep
