#include "server/daemon/daemon.h"

#include <string>
#include <tuple>
#include <utility>
#include <vector>

#include "absl/cleanup/cleanup.h"
#include "absl/functional/function_ref.h"
#include "absl/strings/match.h"
#include "absl/strings/str_cat.h"
#include "absl/time/clock.h"
#include "common/base/env.h"
#include "common/base/status_macros.h"
#include "common/model/signature_limits.h"
#include "common/security/grpc_limits.h"
#include "common/security/tls.h"
#include "server/coordination/coordination_service.h"
#include "server/coordination/coordination_store.h"
#include "server/daemon/daemon_log.h"
#include "server/daemon/grpc_endpoint.h"
#include "server/daemon/shard_restorer.h"
#include "server/daemon/standby_follower.h"
#include "server/daemon/worker_count_probe.h"
#include "server/rpc/grpc_service.h"

namespace lockstep {
namespace {

// How often the daemon looks at timeouts, checkpoints and the job's end.
constexpr absl::Duration kTick = absl::Milliseconds(50);
// How long a finishing server waits for a watcher between two long polls.
constexpr absl::Duration kWatcherGrace = absl::Seconds(1);
// How long a server waits for its ports to be let go of before giving up.
constexpr absl::Duration kPortWait = absl::Seconds(3);
// How long a drain's checkpoint (and weights file) waits for the chunks to
// line up: well inside Kubernetes' default 30 s grace period.
constexpr absl::Duration kDrainCheckpointWait = absl::Seconds(20);

SignatureLimits SignatureLimitsOf(const DaemonOptions& options) {
  SignatureLimits limits;
  limits.max_chunk_bytes = options.max_chunk_bytes;
  limits.max_parameters = options.max_parameters;
  return limits;
}

GrpcEndpoint::Options EndpointOptionsOf(const DaemonOptions& options) {
  GrpcEndpoint::Options endpoint;
  endpoint.listen = options.listen;
  endpoint.max_receive_bytes = MaxRequestBytes(options.max_chunk_bytes);
  endpoint.max_send_bytes = options.max_message_bytes;
  endpoint.limits = options.limits;
  endpoint.port_wait = kPortWait;
  return endpoint;
}

}  // namespace

Daemon::Daemon(DaemonOptions options) : options_(std::move(options)) {}
Daemon::~Daemon() = default;

std::optional<int> Daemon::Tick(absl::Time now) {
  if (std::optional<int> code = watchdog_->CheckStepTimeouts(now)) {
    return code;
  }
  if (checkpointer_ != nullptr) checkpointer_->SaveIfDue(now);
  stragglers_->Check(now);
  if (std::optional<int> code = watchdog_->CheckWorkersGone(now)) {
    return code;
  }
  return watchdog_->FinishIfDone();
}

absl::Status Daemon::CreateCore() {
  ServerTelemetryOptions telemetry_options = options_.telemetry;
  telemetry_options.shard = options_.shard;
  telemetry_options.checkpoints = !options_.checkpoint_dir.empty();
  for (int port :
       {telemetry_options.health_port, telemetry_options.metrics_port}) {
    if (port > 0) {
      WaitForPort(absl::StrCat("0.0.0.0:", port), kPortWait, LogToStderr);
    }
  }
  ASSIGN_OR_RETURN(telemetry_, ServerTelemetry::Create(telemetry_options));
  ParameterServerOptions core_options;
  core_options.num_workers = options_.workers;
  core_options.shard = options_.shard;
  core_options.num_shards = options_.num_shards;
  core_options.observer = telemetry_->observer();
  core_options.sum_order = options_.sum_order;
  core_options.max_state_bytes = options_.max_state_bytes;
  // Pinned for the checkpoints that every shard saves at the same versions.
  if (!options_.checkpoint_dir.empty()) {
    core_options.checkpoint_every_steps = options_.checkpoint_every_steps;
  }
  pool_ = std::make_unique<WorkPool>(options_.server_threads);
  core_options.pool = pool_.get();
  ASSIGN_OR_RETURN(core_, ParameterServer::Create(core_options));
  telemetry_->AttachCore(core_.get(), options_.workers);
  if (!options_.checkpoint_dir.empty()) {
    ASSIGN_OR_RETURN(
        store_, CheckpointStore::Create(options_.checkpoint_dir, options_.shard,
                                        options_.num_shards,
                                        options_.checkpoints_to_keep,
                                        options_.checkpoint_env));
    Checkpointer::Options every;
    every.every_steps = options_.checkpoint_every_steps;
    every.every = options_.checkpoint_every;
    checkpointer_ = std::make_unique<Checkpointer>(
        every, store_.get(), core_.get(), telemetry_.get(), LogToStderr);
  }
  if (!options_.weights_file.empty()) {
    // Written when the job ends: found unwritable now, not after the job.
    RETURN_IF_ERROR(CheckCanWriteFile("--weights_file", options_.weights_file,
                                      options_.checkpoint_env));
    weights_ = std::make_unique<WeightsFileWriter>(
        options_.weights_file, core_.get(), options_.checkpoint_env,
        kDrainCheckpointWait, LogToStderr);
  }
  JobWatchdog::Options watch;
  watch.step_timeout = options_.step_timeout;
  watch.fail_on_worker_loss = options_.fail_on_worker_loss;
  watch.no_worker_timeout = options_.no_worker_timeout;
  watch.exit_when_done = options_.exit_when_done;
  watchdog_ = std::make_unique<JobWatchdog>(watch, core_.get(),
                                            checkpointer_.get(), weights_.get(),
                                            LogToStderr, &coordinator_contact_);
  stragglers_ = std::make_unique<StragglerWatch>(
      options_.shard == 0 ? options_.straggler_fraction : 0, core_.get());
  return absl::OkStatus();
}

std::function<absl::StatusOr<Daemon::Saved>()> Daemon::SaveOnRequest() {
  // What lockstep_ctl checkpoint asks for: a checkpoint (with
  // --checkpoint_dir) and the weights file (with --weights_file).
  if (checkpointer_ == nullptr && weights_ == nullptr) return nullptr;
  return [this]() -> absl::StatusOr<Saved> {
    Saved saved;
    if (checkpointer_ != nullptr) {
      ASSIGN_OR_RETURN(std::tie(saved.checkpoint, saved.version),
                       checkpointer_->Save());
    }
    if (weights_ != nullptr) {
      ASSIGN_OR_RETURN(saved.version, weights_->Write());
      saved.weights_file = weights_->path();
    }
    return saved;
  };
}

bool Daemon::AnnounceListening(int port) {
  const std::string host =
      options_.listen.substr(0, options_.listen.rfind(':'));
  LogToStderr(absl::StrCat("shard ", options_.shard, " of ",
                           options_.num_shards, " listening on ", host, ":",
                           port, " (", DescribeServerSecurity(options_.tls),
                           ") for ", options_.workers, " worker(s)"));
  return WritePortFile(port);
}

bool Daemon::WritePortFile(int port) {
  if (options_.port_file.empty()) return true;
  absl::Status s =
      WriteFileAtomically(options_.port_file, absl::StrCat(port, "\n"));
  if (!s.ok()) LogToStderr(s.ToString());
  return s.ok();
}

bool Daemon::LearnWorkers(const ServerSecurity& security, int* exit_code) {
  absl::StatusOr<LearnedWorkers> learned = LearnWorkerCount(
      EndpointOptionsOf(options_), security.credentials,
      security.authorizer.get(), SignatureLimitsOf(options_).max_workers,
      &stop_, [this](int port) { return WritePortFile(port); }, LogToStderr);
  if (!learned.ok()) {
    LogToStderr(learned.status().ToString());
    *exit_code = absl::IsCancelled(learned.status()) ? kExitOk : kExitPermanent;
    return false;
  }
  options_.workers = learned->workers;
  // The same port, also for --listen's port 0: workers already have it.
  if (!absl::StartsWith(options_.listen, "unix")) {
    options_.listen =
        absl::StrCat(options_.listen.substr(0, options_.listen.rfind(':')), ":",
                     learned->port);
  }
  return true;
}

absl::Status Daemon::RestoreState() {
  ShardRestorer::Options restore;
  restore.checkpoint_dir = options_.checkpoint_dir;
  restore.init_from = options_.init_from;
  restore.shard = options_.shard;
  restore.num_shards = options_.num_shards;
  restore.allow_fresh_start = options_.allow_fresh_start;
  restore.env = options_.checkpoint_env;
  ShardRestorer restorer(restore, store_.get(), core_.get(), LogToStderr);
  ASSIGN_OR_RETURN(const std::optional<int64_t> restored, restorer.Restore());
  if (restored.has_value() && checkpointer_ != nullptr) {
    checkpointer_->Restored(*restored);
  }
  return absl::OkStatus();
}

std::optional<int> Daemon::FollowAsStandby(int port,
                                           ParameterServerService* service) {
  StandbyOptions standby;
  standby.primary = options_.standby_of;
  standby.self = absl::StrCat(
      options_.listen.substr(0, options_.listen.rfind(':')), ":", port);
  standby.tls = options_.tls;
  standby.failover_timeout = options_.failover_timeout;
  standby.shard = options_.shard;
  standby.num_shards = options_.num_shards;
  // A worker's Register is sent on to the primary while it answers (or
  // while this one could not take over), else held until this one takes
  // over: the worker came because its calls to the primary failed.
  standby.send_workers_on = [service, primary = standby.primary](bool on) {
    service->RefuseHeldRegistrations(
        on ? absl::StrCat("this server is the standby of ", primary,
                          ", which serves the job")
           : "");
  };
  LogToStderr(absl::StrCat("standby of ", standby.primary,
                           ": takes over when it does not answer for ",
                           absl::FormatDuration(standby.failover_timeout)));
  absl::StatusOr<StandbyEnd> end = FollowPrimary(standby, &stop_, LogToStderr);
  if (!end.ok()) {
    LogToStderr(std::string(end.status().message()));
    return kExitPermanent;
  }
  if (end->kind == StandbyEnd::kJobDone) {
    LogToStderr("the primary says the job is done; exiting");
    return kExitOk;
  }
  if (end->kind == StandbyEnd::kStopped) return kExitOk;
  const int64_t version = end->state->version;
  if (absl::Status s = core_->Restore(*end->state); !s.ok()) {
    LogToStderr(absl::StrCat("taking over failed: ", s.ToString()));
    return kExitPermanent;
  }
  if (checkpointer_ != nullptr) checkpointer_->Restored(version);
  LogToStderr(
      absl::StrCat("took over from ", standby.primary, " at version ", version,
                   ", ", absl::FormatDuration(absl::Now() - end->primary_lost),
                   " after its last answer"));
  return std::nullopt;
}

int Daemon::ServeUntilDone(absl::FunctionRef<void(bool)> set_serving) {
  while (true) {
    if (stop_.WaitForNotificationWithTimeout(kTick)) {
      // Drain: no new steps, but the step some chunks have closed and others
      // still gather may finish, so that the last checkpoint takes every
      // chunk at one version; then a clean exit.
      LogToStderr("stopping: no new steps are taken");
      set_serving(false);
      core_->StopNewSteps();
      if (checkpointer_ != nullptr) {
        absl::StatusOr<std::pair<std::string, int64_t>> saved =
            checkpointer_->Save(kDrainCheckpointWait);
        if (!saved.ok()) {
          LogToStderr(absl::StrCat("last checkpoint failed: ",
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
  absl::StatusOr<ServerSecurity> security =
      MakeServerSecurity(options_.tls, options_.listen, LogToStderr);
  if (!security.ok()) {
    LogToStderr(std::string(security.status().message()));
    return kExitPermanent;
  }
  if (options_.workers == 0) {
    if (int code = 0; !LearnWorkers(*security, &code)) return code;
  }
  if (absl::Status created = CreateCore(); !created.ok()) {
    LogToStderr(created.ToString());
    return kExitPermanent;
  }
  ParameterServerService service(core_.get(), SaveOnRequest(),
                                 security->authorizer.get(),
                                 SignatureLimitsOf(options_));
  if (checkpointer_ != nullptr) {
    Checkpointer* checkpointer = checkpointer_.get();
    ParameterServerService::Checkpoints checkpoints;
    checkpoints.versions = [checkpointer]() {
      return checkpointer->Versions();
    };
    checkpoints.step_back = [checkpointer](int rank, int64_t incarnation,
                                           int64_t from, int64_t to) {
      return checkpointer->StepBack(rank, incarnation, from, to);
    };
    service.SetCheckpoints(std::move(checkpoints));
  }
  service.HoldRegistration();  // Until the checkpoint is restored (below).
  // Rendezvous for all-reduce workers and an elastic PS job's worker group.
  CoordinationStore coordination_store;
  GroupRendezvous groups([this](const std::string& group, int64_t generation,
                                const std::vector<int>& members) {
    core_->GroupFormed(group, generation, members);
  });
  CoordinatorService coordinator(&coordination_store, &groups,
                                 security->authorizer.get(),
                                 &coordinator_contact_);
  coordinator.SetStepReportSink([this](int rank, auto reports) {
    return core_->NoteStepReports(rank, reports);
  });
  ReplicationService replication(security->authorizer.get());
  if (!options_.standby_of.empty()) {
    replication.SetRefusal(absl::StrCat(
        "this server is the standby of ", options_.standby_of,
        " and keeps a standby of its own only once it has taken over"));
  }
  std::unique_ptr<GrpcEndpoint> endpoint =
      GrpcEndpoint::Start(EndpointOptionsOf(options_), security->credentials,
                          {&service, &coordinator, &replication}, LogToStderr);
  if (endpoint == nullptr) return kExitPermanent;
  // However Run() ends, requested checkpoints finish before the server
  // (and then the service) goes: runs before `endpoint` is destroyed.
  absl::Cleanup stop_saving = [&]() { service.StopSaving(); };
  // NOT_SERVING while the checkpoint loads and while draining.
  auto set_serving = [&](bool serving) {
    endpoint->SetServing(serving);
    telemetry_->SetServing(serving);
  };
  set_serving(false);
  // However Run() ends, held registrations are answered (shutdown waits).
  absl::Cleanup release_registrations = [&]() {
    core_->Shutdown();
    service.OpenRegistration();
  };
  if (!AnnounceListening(endpoint->port())) return kExitPermanent;

  // Probes see NOT_SERVING, and GetStatus answers, while it restores.
  if (!options_.standby_of.empty()) {
    if (std::optional<int> code = FollowAsStandby(endpoint->port(), &service)) {
      return *code;
    }
  } else if (!RestoreState().ok()) {
    return kExitPermanent;
  }
  if (options_.replicas > 1) {
    ReplicationSource::Options source;
    source.standby_timeout = options_.standby_timeout;
    replication_ =
        std::make_unique<ReplicationSource>(source, core_.get(), LogToStderr);
    ReplicationSource* replicas = replication_.get();
    replication.SetSource([replicas](int64_t held, const std::string& standby,
                                     ReplicationService::Done done) {
      replicas->Follow(held, standby, std::move(done));
    });
    service.SetReplyGate(replicas);
  }
  // However Run() ends, held answers go (UNAVAILABLE) before the core.
  absl::Cleanup stop_replication = [&]() {
    if (replication_ != nullptr) replication_->Shutdown();
  };
  service.OpenRegistration();
  set_serving(true);

  const absl::Time start = absl::Now();
  const int exit_code = ServeUntilDone(set_serving);
  if (replication_ != nullptr) {
    // A finished job's standby ends too; after a drain it takes over.
    if (core_->WaitUntilDone(absl::ZeroDuration())) {
      replication_->TellJobDone(kWatcherGrace);
    }
    const ReplicationSource::Stats sent = replication_->stats();
    LogToStderr(absl::StrCat(
        "replication: ", sent.versions_sent, " version(s) sent to standbys, ",
        sent.bytes_sent, " bytes, ", sent.encode_seconds, " s taking and "
        "encoding them"));
  }
  const ServerStatus last = core_->GetStatus();  // Bytes: payloads moved.
  LogToStderr(absl::StrCat("final version ", last.version, " after ",
                           absl::FormatDuration(absl::Now() - start),
                           " (received ", last.counters.bytes_received,
                           " gradient bytes, sent ", last.counters.bytes_sent,
                           " weight bytes); exiting"));
  set_serving(false);  // Also when Tick ended the job.
  core_->Shutdown();
  service.AnswerStatusWaits(kWatcherGrace);  // The final status, to watchers.
  // A checkpoint being written on request ends before the 5 s below.
  service.StopSaving();
  endpoint->Shutdown(absl::Now() + absl::Seconds(5));
  if (absl::Status s = telemetry_->FlushTrace(); !s.ok()) {
    LogToStderr(s.ToString());
  }
  return exit_code;
}

}  // namespace lockstep
