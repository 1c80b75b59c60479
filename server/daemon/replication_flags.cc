#include "server/daemon/replication_flags.h"

#include <cmath>
#include <string>

#include "absl/flags/flag.h"
#include "absl/strings/str_cat.h"
#include "server/daemon/grpc_endpoint.h"

ABSL_FLAG(int, replicas, 1,
          "2: keep a standby of this shard in step (one started with "
          "--standby_of=THIS_ADDRESS); answers wait until it holds their "
          "version, so that it takes over without a step computed again.");
ABSL_FLAG(std::string, standby_of, "",
          "HOST:PORT of the primary shard this server follows as its standby: "
          "it takes over, at the version the job is at, when the primary "
          "does not answer for --failover_timeout_s. Give it the primary's "
          "--shard, --num_shards, --workers and checkpoint flags; workers "
          "list it in --standby_servers.");
ABSL_FLAG(double, failover_timeout_s, 1.0,
          "A standby takes over after this long without an answer from its "
          "primary.");
ABSL_FLAG(double, standby_timeout_s, 5.0,
          "With --replicas=2: a standby that has not followed for this long "
          "is given up, and the shard goes on alone until one follows again.");

namespace lockstep {
namespace {

absl::StatusOr<absl::Duration> PositiveSeconds(const char* name, double s) {
  if (!std::isfinite(s) || s <= 0 || s > 3600) {
    return absl::InvalidArgumentError(
        absl::StrCat("--", name, " must be in (0, 3600] seconds, got ", s));
  }
  return absl::Seconds(s);
}

}  // namespace

absl::Status ParseReplication(DaemonOptions* options) {
  options->replicas = absl::GetFlag(FLAGS_replicas);
  if (options->replicas != 1 && options->replicas != 2) {
    return absl::InvalidArgumentError(absl::StrCat(
        "--replicas must be 1 or 2 (one standby per shard), got ",
        options->replicas));
  }
  options->standby_of = absl::GetFlag(FLAGS_standby_of);
  if (!options->standby_of.empty()) {
    if (absl::Status s = CheckListenAddress("--standby_of", options->standby_of);
        !s.ok()) {
      return s;
    }
    if (options->workers == 0) {
      return absl::InvalidArgumentError(
          "--standby_of needs the job's worker count in --workers (a standby "
          "cannot learn it: no worker calls it before it takes over)");
    }
    // Once it has taken over it keeps a standby of its own.
    options->replicas = 2;
  }
  absl::StatusOr<absl::Duration> failover = PositiveSeconds(
      "failover_timeout_s", absl::GetFlag(FLAGS_failover_timeout_s));
  if (!failover.ok()) return failover.status();
  options->failover_timeout = *failover;
  absl::StatusOr<absl::Duration> standby = PositiveSeconds(
      "standby_timeout_s", absl::GetFlag(FLAGS_standby_timeout_s));
  if (!standby.ok()) return standby.status();
  options->standby_timeout = *standby;
  return absl::OkStatus();
}

}  // namespace lockstep
