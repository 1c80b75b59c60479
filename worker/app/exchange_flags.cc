// lockstep_worker's exchange flags (worker_flag_groups.h).
#include <optional>
#include <string>
#include <utility>

#include "absl/flags/flag.h"
#include "absl/strings/match.h"
#include "absl/strings/str_cat.h"
#include "common/base/env.h"
#include "common/base/status_macros.h"
#include "common/flags/flags.h"
#include "common/model/chunk_plan.h"
#include "common/security/tls_flags.h"
#include "common/wire/wire_codec.h"
#include "worker/app/setup.h"
#include "worker/app/worker_flag_groups.h"
#include "worker/exchange/semi_sync_step_session.h"

ABSL_FLAG(std::string, sync, "ps",
          "How gradients are combined: ps (synchronous parameter server), "
          "allreduce (among the workers, see --allreduce; the first server "
          "only hosts the rendezvous), async (the server applies each "
          "gradient as it arrives), ssp (bounded staleness, --staleness), "
          "or semi-synchronous on the servers: localsgd (every "
          "--local_steps steps of --optimizer, the servers average the "
          "workers' weights) or diloco (the servers apply Nesterov momentum, "
          "--outer_lr and --outer_momentum, to the workers' mean change).");
ABSL_FLAG(std::optional<int>, local_steps, std::nullopt,
          "sync=localsgd or diloco: steps each worker takes on its own "
          "between two exchanges (at least 2; default 10).");
// Unset (std::nullopt): the mode's default.
ABSL_FLAG(std::optional<double>, outer_lr, std::nullopt,
          "sync=localsgd or diloco: the servers' learning rate on the "
          "workers' mean change (default 1.0 for localsgd, which makes the "
          "next version the mean of the workers' weights; 0.7 for diloco).");
ABSL_FLAG(std::optional<double>, outer_momentum, std::nullopt,
          "sync=diloco: the servers' Nesterov momentum (default 0.9).");
ABSL_FLAG(std::string, inner_state_dir, "",
          "sync=localsgd or diloco: a folder (created if missing) where the "
          "worker saves its inner optimizer's state before each round's "
          "push, its newest 3 versions, so that a replacement worker of the "
          "same rank goes on with it (the servers checkpoint only the outer "
          "optimizer). Empty: a replacement starts with a fresh state.");
ABSL_FLAG(std::string, allreduce, "gloo",
          "sync=allreduce backend: gloo (TCP), grpc-ring (Lockstep's own "
          "ring over gRPC) or nccl (GPUs).");
ABSL_FLAG(std::string, allreduce_host, "127.0.0.1",
          "sync=allreduce: the address other workers reach this one at.");
ABSL_FLAG(std::string, allreduce_group, "lockstep",
          "sync=allreduce: rendezvous key prefix, without '/'; use a new one "
          "per run against a long-lived server.");
ABSL_FLAG(int, min_workers, 0,
          "sync=allreduce or ps: the fewest workers the job goes on with "
          "(elastic: ranks may leave and join at step boundaries while at "
          "least this many train; --workers is then the most). 0: --workers.");
ABSL_FLAG(int, group_settle_ms, 1000,
          "with --min_workers: how long a re-forming group waits for more "
          "members after the last one joined.");
ABSL_FLAG(int, backup_workers, 0,
          "sync=ps: each step applies the first workers - b gradients to "
          "arrive; late ones are dropped and counted.");
ABSL_FLAG(int, staleness, 1,
          "sync=ssp: how many steps a worker may run ahead of the slowest.");
ABSL_FLAG(std::string, straggle, "",
          "Slow ranks on purpose: RANK:MS[,RANK:MS...] adds MS milliseconds "
          "to every step of RANK.");
ABSL_FLAG(std::string, straggle_input, "",
          "Slow input on purpose: RANK:MS[,RANK:MS...] adds MS milliseconds "
          "to the batch loading of every step of RANK (--straggle slows its "
          "compute).");
ABSL_FLAG(int, straggle_random_ms, 0,
          "Adds a random delay, uniform in [0, N] ms and seeded, to every "
          "step of every worker.");
ABSL_FLAG(std::string, wire_dtype, "fp32",
          "Encoding of gradients and weights on the wire: fp32 | bf16 | fp16 "
          "(servers always sum and keep fp32).");
ABSL_FLAG(std::string, push_window, "auto",
          "Gradient chunks a worker has in flight to each server shard at "
          "once (a push waits at the server until every worker has pushed "
          "that chunk); 0: every chunk as soon as it is ready; auto: as many "
          "as keep all workers' pushes at a shard within 32 MiB, 1 to 4 "
          "(4 MiB chunks: 2 workers 4, 4 workers 2, 8 or more 1).");
ABSL_FLAG(std::string, push_thread, "auto",
          "Where gradient chunks are encoded and their pushes started: on "
          "(a thread of their own, so that the training thread only queues "
          "the backward pass), off (the training thread, as each layer's "
          "gradient is ready), or auto (on with a GPU, off on the CPU).");
ABSL_FLAG(int, connect_timeout_s, 60, "Seconds to wait for the server.");
ABSL_FLAG(int, rejoin_timeout_s, 300,
          "After the server restarts, gives up on a step or evicts this "
          "worker, keep registering again (with backoff) for this long.");
ABSL_FLAG(int, step_timeout_s, 300,
          "Seconds a step's pushes may take from the step's start, the "
          "backward pass and waiting for the slowest worker included.");

namespace lockstep {
namespace {

// --sync=localsgd or diloco: the rounds of local steps and the servers'
// (outer) optimizer; the job's --optimizer is the workers' inner one.
absl::Status ParseLocalSteps(const std::string& sync,
                             StepSessionOptions* session) {
  const int local_steps =
      absl::GetFlag(FLAGS_local_steps).value_or(kDefaultLocalSteps);
  RETURN_IF_ERROR(CheckLocalSteps(local_steps, "--local_steps"));
  session->local_steps = local_steps;
  ASSIGN_OR_RETURN(session->outer_optimizer,
                   OuterOptimizer(sync, absl::GetFlag(FLAGS_outer_lr),
                                  absl::GetFlag(FLAGS_outer_momentum)));
  const std::string dir = absl::GetFlag(FLAGS_inner_state_dir);
  if (!dir.empty()) {
    // Refused now, not at the first round's end.
    absl::Status can = Env::Default()->CreateDirs(dir);
    if (can.ok()) {
      can = CheckCanWriteFile(
          "--inner_state_dir",
          absl::StrCat(dir, "/inner-rank", session->rank, ".probe"));
    }
    if (!can.ok()) {
      return absl::InvalidArgumentError(absl::StrCat(
          absl::StartsWith(can.message(), "--") ? "" : "--inner_state_dir: ",
          can.message()));
    }
    session->inner_state_dir = dir;
  }
  return absl::OkStatus();
}

// How the worker exchanges: its deadlines, credentials and sync mode.
absl::Status ParseExchange(WorkerMainOptions* options) {
  WorkerMainOptions& o = *options;
  for (const auto& [name, value] :
       {std::pair<const char*, int>{"connect_timeout_s",
                                    absl::GetFlag(FLAGS_connect_timeout_s)},
        {"step_timeout_s", absl::GetFlag(FLAGS_step_timeout_s)},
        {"rejoin_timeout_s", absl::GetFlag(FLAGS_rejoin_timeout_s)}}) {
    if (value < 1) {
      return absl::InvalidArgumentError(absl::StrCat(
          "--", name, " must be at least 1 (seconds), got ", value));
    }
  }
  // The one place the worker reads --tls_* and --token_file: the client
  // and the all-reduce library are given the result.
  ASSIGN_OR_RETURN(o.session.client.tls, TlsOptionsFromFlags());
  o.session.reducer.tls = o.session.client.tls;
  o.session.client.connect_timeout =
      absl::Seconds(absl::GetFlag(FLAGS_connect_timeout_s));
  o.session.client.step_timeout =
      absl::Seconds(absl::GetFlag(FLAGS_step_timeout_s));
  o.session.rejoin_timeout_name = "--rejoin_timeout_s";
  o.session.rejoin_timeout =
      absl::Seconds(absl::GetFlag(FLAGS_rejoin_timeout_s));
  const std::string sync = absl::GetFlag(FLAGS_sync);
  const int rank = o.trainer.rank;
  const int workers = o.trainer.num_workers;
  o.session.rank = rank;
  o.session.num_workers = workers;
  o.session.who = absl::StrCat("lockstep_worker ", rank);
  o.session.seed = o.trainer.seed;
  o.session.allreduce = sync == "allreduce";
  if (sync == "ps") {
    o.trainer.sync = SyncMode::kSync;
  } else if (sync == "async") {
    o.trainer.sync = SyncMode::kAsync;
  } else if (sync == "ssp") {
    o.trainer.sync = SyncMode::kSsp;
  } else if (sync == "allreduce") {
    o.trainer.sync = SyncMode::kAllReduce;
    o.session.reducer.backend = absl::GetFlag(FLAGS_allreduce);
    o.session.reducer.rank = rank;
    o.session.reducer.size = workers;
    o.session.reducer.coordinator = o.session.client.servers.front();
    o.session.reducer.host = absl::GetFlag(FLAGS_allreduce_host);
    o.session.reducer.group = absl::GetFlag(FLAGS_allreduce_group);
    o.session.reducer.gpu =
        o.device.gpu;  // NCCL's ranks each on their own GPU.
    // The same deadlines as in PS mode: waiting for the other ranks to
    // arrive, and for one step's exchange (the slowest rank's compute, or
    // rank 0's evaluation, included).
    o.session.reducer.rendezvous_timeout = o.session.client.connect_timeout;
    o.session.reducer.op_timeout = o.session.client.step_timeout;
  } else if (sync == "localsgd" || sync == "diloco") {
    o.trainer.sync = SyncMode::kSync;
    RETURN_IF_ERROR(ParseLocalSteps(sync, &o.session));
  } else {
    return absl::InvalidArgumentError(
        absl::StrCat("--sync must be ps, allreduce, async, ssp, localsgd or "
                     "diloco, got \"",
                     sync, "\""));
  }
  if (o.session.local_steps == 0 &&
      (absl::GetFlag(FLAGS_local_steps).has_value() ||
       absl::GetFlag(FLAGS_outer_lr).has_value() ||
       absl::GetFlag(FLAGS_outer_momentum).has_value() ||
       !absl::GetFlag(FLAGS_inner_state_dir).empty())) {
    return absl::InvalidArgumentError(
        "--local_steps, --outer_lr, --outer_momentum and --inner_state_dir "
        "need --sync=localsgd or --sync=diloco");
  }
  return absl::OkStatus();
}

// --min_workers and --group_settle_ms: how an all-reduce group forms.
absl::Status ParseGroupFlags(WorkerMainOptions* options) {
  WorkerMainOptions& o = *options;
  const int workers = o.trainer.num_workers;
  o.session.group.min_workers = absl::GetFlag(FLAGS_min_workers);
  if (o.session.group.min_workers < 0 ||
      o.session.group.min_workers > workers) {
    return absl::InvalidArgumentError(
        absl::StrCat("--min_workers must be in [1, --workers=", workers,
                     "] (or 0), got ", o.session.group.min_workers));
  }
  if (o.session.group.min_workers > 0 &&
      o.session.group.min_workers < workers &&
      o.trainer.sync != SyncMode::kAllReduce &&
      (o.trainer.sync != SyncMode::kSync ||
       absl::GetFlag(FLAGS_backup_workers) > 0)) {
    return absl::InvalidArgumentError(
        "--min_workers below --workers needs --sync=allreduce, or --sync=ps, "
        "localsgd or diloco without --backup_workers: the asynchronous "
        "modes have no steps every worker shares");
  }
  if (o.session.group.min_workers > 0 &&
      o.session.group.min_workers < workers &&
      !o.session.client.standby_servers.empty()) {
    return absl::InvalidArgumentError(
        "--standby_servers and an elastic job (--min_workers below "
        "--workers) do not go together yet: the group forms at the first "
        "shard's coordinator, which does not fail over to its standby");
  }
  const int settle_ms = absl::GetFlag(FLAGS_group_settle_ms);
  if (settle_ms < 0 || settle_ms > 600000) {
    return absl::InvalidArgumentError(absl::StrCat(
        "--group_settle_ms must be in [0, 600000], got ", settle_ms));
  }
  o.session.group.settle = absl::Milliseconds(settle_ms);
  return absl::OkStatus();
}

// Backup workers, staleness, stragglers, and how pushes go on the wire.
absl::Status ParseStepFlags(WorkerMainOptions* options) {
  WorkerMainOptions& o = *options;
  const int rank = o.trainer.rank;
  const int workers = o.trainer.num_workers;
  o.trainer.backup_workers = absl::GetFlag(FLAGS_backup_workers);
  if (o.trainer.backup_workers < 0 || o.trainer.backup_workers >= workers) {
    return absl::InvalidArgumentError(
        absl::StrCat("--backup_workers must be in [0, ", workers, ")"));
  }
  if (o.trainer.backup_workers > 0 && o.trainer.sync != SyncMode::kSync) {
    return absl::InvalidArgumentError("--backup_workers needs --sync=ps");
  }
  RETURN_IF_ERROR(ParseGroupFlags(&o));
  o.trainer.staleness = absl::GetFlag(FLAGS_staleness);
  if (o.trainer.staleness < 0) {
    return absl::InvalidArgumentError("--staleness must not be negative");
  }
  ASSIGN_OR_RETURN(o.trainer.straggle_ms,
                   StraggleFor(absl::GetFlag(FLAGS_straggle), rank));
  ASSIGN_OR_RETURN(o.trainer.straggle_input_ms,
                   StraggleFor(absl::GetFlag(FLAGS_straggle_input), rank,
                               "--straggle_input"));
  o.trainer.straggle_random_ms = absl::GetFlag(FLAGS_straggle_random_ms);
  if (o.trainer.straggle_random_ms < 0) {
    return absl::InvalidArgumentError(
        "--straggle_random_ms must not be negative");
  }
  ASSIGN_OR_RETURN(o.session.client.wire_dtype,
                   ParseWireDType(absl::GetFlag(FLAGS_wire_dtype)));
  // auto picks at most kDefaultChunkBytes.
  o.session.client.max_message_bytes =
      static_cast<int>(o.trainer.chunk_bytes == kAutoChunkBytes
                           ? kDefaultChunkBytes
                           : o.trainer.chunk_bytes) +
      (1 << 20);
  ASSIGN_OR_RETURN(o.session.client.max_pushes_in_flight,
                   FromFlag("push_window",
                            ParsePushWindow(absl::GetFlag(FLAGS_push_window))));
  const std::string push_thread = absl::GetFlag(FLAGS_push_thread);
  if (push_thread == "on" || push_thread == "off") {
    o.push_thread = push_thread == "on";
  } else if (push_thread != "auto") {
    return absl::InvalidArgumentError(absl::StrCat(
        "--push_thread must be on, off or auto, got \"", push_thread, "\""));
  }
  return absl::OkStatus();
}

}  // namespace

absl::Status ParseExchangeFlags(WorkerMainOptions* options) {
  RETURN_IF_ERROR(ParseExchange(options));
  RETURN_IF_ERROR(ParseStepFlags(options));
  options->sync = absl::GetFlag(FLAGS_sync);
  return absl::OkStatus();
}

}  // namespace lockstep
