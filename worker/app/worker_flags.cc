#include "worker/app/worker_flags.h"

#include <cstdlib>
#include <string>

#include "absl/flags/flag.h"
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
ABSL_FLAG(int, rank, -1,
          "This worker's rank in [0, workers). Default: from "
          "TF_CONFIG (chief is 0, worker i is i+1 with a chief).");
ABSL_FLAG(int, workers, 0,
          "Workers in the job. Default: TF_CONFIG's chief + worker count.");

namespace lockstep {
namespace {

// The servers, this worker's rank and the job's workers (flags, TF_CONFIG).
absl::Status ParseJob(WorkerMainOptions* options) {
  WorkerMainOptions& o = *options;
  std::string servers = absl::GetFlag(FLAGS_servers);
  int rank = absl::GetFlag(FLAGS_rank);
  int workers = absl::GetFlag(FLAGS_workers);
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
        "no parameter server: pass --servers=HOST:PORT or set TF_CONFIG");
  }
  o.session.client.servers = absl::StrSplit(servers, ',', absl::SkipEmpty());
  o.trainer.num_shards = static_cast<int>(o.session.client.servers.size());
  if (workers < 1) {
    return absl::InvalidArgumentError(
        "--workers must be at least 1 (or come from TF_CONFIG)");
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
