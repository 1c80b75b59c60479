#include "worker/app/worker_flags.h"

#include <cstdio>
#include <cstdlib>
#include <string>

#include "absl/flags/flag.h"
#include "absl/strings/numbers.h"
#include "absl/strings/str_cat.h"
#include "absl/strings/str_join.h"
#include "absl/strings/str_split.h"
#include "common/base/status_macros.h"
#include "common/formats/tf_config.h"
#include "worker/app/worker_flag_groups.h"

// The job; the other groups' flags are defined in the files
// worker_flag_groups.h names.
ABSL_FLAG(std::string, servers, "",
          "Parameter-server shard addresses, host:port, comma-separated in "
          "shard order. Default: TF_CONFIG's ps list.");
ABSL_FLAG(std::string, standby_servers, "",
          "Each shard's standby (lockstep_server --standby_of), host:port, "
          "comma-separated in shard order: calls fail over to it when its "
          "primary is lost. Default: none.");
ABSL_FLAG(int, rank, -1,
          "This worker's rank in [0, workers). Default: PET_NODE_RANK "
          "(Kubeflow Trainer), else from TF_CONFIG (chief is 0, worker i "
          "is i+1 with a chief).");
ABSL_FLAG(int, workers, 0,
          "Workers in the job. Default: PET_NNODES (Kubeflow Trainer: the "
          "TrainJob's numNodes), else TF_CONFIG's chief + worker count.");

namespace lockstep {
namespace {

// A whole number from `variable`; -1 when it is unset or empty.
absl::StatusOr<int> IntFromEnvironment(const char* variable) {
  const char* text = std::getenv(variable);
  if (text == nullptr || *text == '\0') return -1;
  int value = 0;
  if (!absl::SimpleAtoi(text, &value) || value < 0) {
    return absl::InvalidArgumentError(absl::StrCat(
        variable, "=", text, " is not a whole number of at least 0"));
  }
  return value;
}

// Kubeflow Trainer's torch policy describes a pod with torchrun's flags:
// PET_NNODES pods, this one PET_NODE_RANK. lockstep_worker is one process
// a pod whatever PET_NPROC_PER_NODE says (torchrun's count, which Trainer
// sets to the pod's CPUs by default); it is said once when not 1.
absl::Status ApplyTrainerEnvironment(int* rank, int* workers) {
  ASSIGN_OR_RETURN(const int nodes, IntFromEnvironment("PET_NNODES"));
  if (nodes < 0) return absl::OkStatus();
  ASSIGN_OR_RETURN(const int node_rank, IntFromEnvironment("PET_NODE_RANK"));
  if (*workers == 0) *workers = nodes;
  if (*rank < 0) *rank = node_rank;
  if (const char* per_node = std::getenv("PET_NPROC_PER_NODE");
      per_node != nullptr && *per_node != '\0' &&
      std::string(per_node) != "1") {
    std::fprintf(stderr,
                 "lockstep_worker: PET_NPROC_PER_NODE=%s is torchrun's; "
                 "lockstep_worker is one process a pod (its threads use the "
                 "pod's CPUs), rank PET_NODE_RANK of PET_NNODES\n",
                 per_node);
  }
  return absl::OkStatus();
}

// The servers, this worker's rank and the job's workers (flags, Kubeflow
// Trainer's PET_* variables, TF_CONFIG).
absl::Status ParseJob(WorkerMainOptions* options) {
  WorkerMainOptions& o = *options;
  std::string servers = absl::GetFlag(FLAGS_servers);
  int rank = absl::GetFlag(FLAGS_rank);
  int workers = absl::GetFlag(FLAGS_workers);
  RETURN_IF_ERROR(ApplyTrainerEnvironment(&rank, &workers));
  if (const char* env = std::getenv("TF_CONFIG"); env != nullptr && *env) {
    ASSIGN_OR_RETURN(TfConfig tf, ParseTfConfig(env));
    if (servers.empty()) servers = absl::StrJoin(tf.PsAddresses(), ",");
    if (workers == 0) workers = tf.NumWorkers();
    if (rank < 0) {
      ASSIGN_OR_RETURN(rank, tf.WorkerRank());
    }
  }
  if (servers.empty()) {
    return absl::InvalidArgumentError(
        "no parameter server: pass --servers=HOST:PORT (or set "
        "LOCKSTEP_SERVERS or TF_CONFIG)");
  }
  o.session.client.servers = absl::StrSplit(servers, ',', absl::SkipEmpty());
  o.session.client.standby_servers = absl::StrSplit(
      absl::GetFlag(FLAGS_standby_servers), ',', absl::SkipEmpty());
  if (!o.session.client.standby_servers.empty() &&
      o.session.client.standby_servers.size() !=
          o.session.client.servers.size()) {
    return absl::InvalidArgumentError(absl::StrCat(
        "--standby_servers needs one standby per shard: ",
        o.session.client.servers.size(), " server(s), ",
        o.session.client.standby_servers.size(), " standby(s)"));
  }
  o.trainer.num_shards = static_cast<int>(o.session.client.servers.size());
  if (workers < 1) {
    return absl::InvalidArgumentError(
        "--workers must be at least 1 (or come from PET_NNODES or "
        "TF_CONFIG)");
  }
  if (rank < 0 || rank >= workers) {
    return absl::InvalidArgumentError(
        absl::StrCat("--rank must be in [0, ", workers, "), got ", rank));
  }
  o.trainer.rank = rank;
  o.trainer.num_workers = workers;
  return absl::OkStatus();
}

}  // namespace

absl::StatusOr<WorkerMainOptions> WorkerOptionsFromFlags() {
  WorkerMainOptions o;
  RETURN_IF_ERROR(ParseJob(&o));
  RETURN_IF_ERROR(ParseModelFlags(&o));
  RETURN_IF_ERROR(ParseDeviceAndOutputFlags(&o));
  RETURN_IF_ERROR(ParseExchangeFlags(&o));
  return o;
}

}  // namespace lockstep
