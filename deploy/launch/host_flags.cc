#include "deploy/launch/host_flags.h"

#include <limits.h>
#include <unistd.h>

#include <cerrno>
#include <cstdint>
#include <cstring>
#include <string>
#include <utility>
#include <vector>

#include "absl/flags/declare.h"
#include "absl/flags/flag.h"
#include "absl/status/statusor.h"
#include "absl/strings/str_cat.h"
#include "absl/strings/str_split.h"
#include "deploy/launch/host_list.h"
#include "deploy/launch/node_flags.h"

ABSL_FLAG(std::string, hosts, "",
          "Run the job across these hosts over ssh: HOST[:SLOTS],... (for "
          "example h1:2,h2:2; user@host works; SLOTS defaults to 1). Workers "
          "fill each host's slots in order, rank 0 on the first; every "
          "process runs as `ssh -o BatchMode=yes HOST` in this folder, with "
          "the binaries at the same path (or --remote_bin_dir). Empty: "
          "everything on this machine.");
ABSL_FLAG(std::string, ps_hosts, "",
          "With --hosts: the hosts of the server shards, HOST,... "
          "round-robin (slots are ignored). Default: the --hosts list.");
ABSL_FLAG(int32_t, server_port, 50051,
          "With --hosts: shard i listens on every interface of its host at "
          "this port + i, and the workers reach it at HOST:PORT.");
ABSL_FLAG(std::string, ssh_args, "",
          "With --hosts: extra ssh arguments, split at spaces, for example "
          "\"-F /path/ssh_config\" or \"-i KEY -p 2222\".");
ABSL_FLAG(std::string, remote_bin_dir, "",
          "With --hosts: the folder of lockstep_server and lockstep_worker "
          "on the hosts. Default: --bin_dir (this launcher's folder).");
ABSL_FLAG(std::string, nproc_per_node, "",
          "torchrun's spelling: N workers on each host, so --workers=N on "
          "this machine, or N times the hosts with --hosts (each host's "
          "slots become N). --workers, if also given, must agree. A number: "
          "the hosts' GPUs are not counted (no auto or gpu).");
ABSL_FLAG(std::string, nnodes, "",
          "torchrun's spelling: the number of hosts, checked against --hosts "
          "(1 without it); no elastic MIN:MAX range.");
ABSL_FLAG(std::string, node_rank, "",
          "torchrun's spelling; only 0 is taken: this one launcher starts "
          "the processes of every host over ssh, where torchrun runs once "
          "per node and is told its place.");
ABSL_DECLARE_FLAG(int32_t, gpus);

namespace lockstep {
namespace {

// The host list in flag `flag`, parsed; its errors name the flag.
absl::StatusOr<std::vector<HostSlots>> HostsOf(const char* flag,
                                               const std::string& value) {
  absl::StatusOr<std::vector<HostSlots>> hosts = ParseHostList(value);
  if (!hosts.ok()) {
    return absl::InvalidArgumentError(
        absl::StrCat("--", flag, ": ", hosts.status().message()));
  }
  return hosts;
}

// A host flag given without --hosts, if any.
absl::Status CheckNoHostFlags() {
  const std::pair<const char*, std::string> flags[] = {
      {"ps_hosts", absl::GetFlag(FLAGS_ps_hosts)},
      {"ssh_args", absl::GetFlag(FLAGS_ssh_args)},
      {"remote_bin_dir", absl::GetFlag(FLAGS_remote_bin_dir)}};
  for (const auto& [flag, value] : flags) {
    if (!value.empty()) {
      return absl::InvalidArgumentError(
          absl::StrCat("--", flag, " needs --hosts"));
    }
  }
  return absl::OkStatus();
}

// The placement of `options`' workers and shards on `hosts` (--hosts) and
// --ps_hosts, with the server port and ssh arguments.
absl::StatusOr<HostPlan> PlanFromFlags(const LaunchOptions& options,
                                       const std::vector<HostSlots>& hosts) {
  std::vector<HostSlots> server_hosts;
  if (const std::string ps_hosts = absl::GetFlag(FLAGS_ps_hosts);
      !ps_hosts.empty()) {
    absl::StatusOr<std::vector<HostSlots>> parsed =
        HostsOf("ps_hosts", ps_hosts);
    if (!parsed.ok()) return parsed.status();
    server_hosts = *std::move(parsed);
  }
  absl::StatusOr<HostPlan> plan =
      PlaceOnHosts(hosts, server_hosts, options.workers, options.ps);
  if (!plan.ok()) {
    return absl::InvalidArgumentError(
        absl::StrCat("--hosts: ", plan.status().message()));
  }
  const int port = absl::GetFlag(FLAGS_server_port);
  if (port < 1 || port > 65536 - options.ps) {
    return absl::InvalidArgumentError(
        absl::StrCat("--server_port: must be 1 to ", 65536 - options.ps,
                     " for ", options.ps, " shard(s), got ", port));
  }
  plan->server_port = port;
  for (absl::string_view arg :
       absl::StrSplit(absl::GetFlag(FLAGS_ssh_args), ' ', absl::SkipEmpty())) {
    plan->ssh_args.emplace_back(arg);
  }
  return plan;
}

}  // namespace

absl::Status ApplyHostFlags(LaunchOptions* options, bool workers_given) {
  const bool across_hosts = !absl::GetFlag(FLAGS_hosts).empty();
  std::vector<HostSlots> hosts;
  if (across_hosts) {
    absl::StatusOr<std::vector<HostSlots>> parsed =
        HostsOf("hosts", absl::GetFlag(FLAGS_hosts));
    if (!parsed.ok()) return parsed.status();
    hosts = *std::move(parsed);
  }
  NodeFlags node_flags;
  if (workers_given) node_flags.workers = options->workers;
  node_flags.nproc_per_node = absl::GetFlag(FLAGS_nproc_per_node);
  node_flags.nnodes = absl::GetFlag(FLAGS_nnodes);
  node_flags.node_rank = absl::GetFlag(FLAGS_node_rank);
  absl::StatusOr<int> workers = ApplyNodeFlags(node_flags, options->workers,
                                               across_hosts ? &hosts : nullptr);
  if (!workers.ok()) return workers.status();
  options->workers = *workers;
  if (!across_hosts) return CheckNoHostFlags();
  absl::StatusOr<HostPlan> plan = PlanFromFlags(*options, hosts);
  if (!plan.ok()) return plan.status();
  char cwd[PATH_MAX];
  if (getcwd(cwd, sizeof(cwd)) == nullptr) {
    return absl::InternalError(
        absl::StrCat("cannot read the current folder: ", strerror(errno)));
  }
  plan->dir = cwd;
  plan->grace = options->grace_period;
  options->hosts = *std::move(plan);
  if (const std::string dir = absl::GetFlag(FLAGS_remote_bin_dir);
      !dir.empty()) {
    options->bin_dir = dir;
  }
  if (absl::GetFlag(FLAGS_gpus) < 0) options->gpus = 0;
  return absl::OkStatus();
}

}  // namespace lockstep
