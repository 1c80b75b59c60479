#include "deploy/launch/node_flags.h"

#include <climits>
#include <string>
#include <vector>

#include "absl/status/status.h"
#include "absl/strings/numbers.h"
#include "absl/strings/str_cat.h"
#include "absl/strings/string_view.h"

namespace lockstep {
namespace {

// `text` as a positive number, if it is one.
std::optional<int> Positive(absl::string_view text) {
  int value = 0;
  if (!absl::SimpleAtoi(text, &value) || value < 1) return std::nullopt;
  return value;
}

// --nnodes checked against the `nodes` the launcher runs on; `hosts_given`
// says whether they came from --hosts.
absl::Status CheckNnodes(const std::string& nnodes, int nodes,
                         bool hosts_given) {
  const std::string flag = absl::StrCat("--nnodes=", nnodes);
  std::optional<int> count = Positive(nnodes);
  if (const size_t colon = nnodes.find(':'); colon != std::string::npos) {
    // torchrun's elastic MIN:MAX; MIN == MAX is a fixed count.
    std::optional<int> min = Positive(nnodes.substr(0, colon));
    std::optional<int> max = Positive(nnodes.substr(colon + 1));
    if (min.has_value() && max.has_value() && *min != *max) {
      return absl::InvalidArgumentError(absl::StrCat(
          flag,
          ": an elastic range; a Lockstep job runs on the fixed hosts "
          "of --hosts: give their number"));
    }
    count = min == max ? min : std::nullopt;
  }
  if (!count.has_value()) {
    return absl::InvalidArgumentError(
        absl::StrCat(flag, ": not a positive number of hosts"));
  }
  if (*count == nodes) return absl::OkStatus();
  if (!hosts_given) {
    return absl::InvalidArgumentError(
        absl::StrCat(flag,
                     ": without --hosts the job runs on this machine alone (1 "
                     "node); give the ",
                     *count, " hosts as --hosts=HOST,..."));
  }
  return absl::InvalidArgumentError(absl::StrCat(
      flag, ", but --hosts lists ", nodes,
      " host(s); a node is a --hosts entry, and the launcher starts the "
      "processes of all of them"));
}

}  // namespace

absl::StatusOr<int> ApplyNodeFlags(const NodeFlags& flags, int default_workers,
                                   std::vector<HostSlots>* hosts) {
  const bool hosts_given = hosts != nullptr;
  const int nodes = hosts_given ? static_cast<int>(hosts->size()) : 1;
  if (!flags.node_rank.empty() && flags.node_rank != "0") {
    int rank = 0;
    return absl::InvalidArgumentError(absl::StrCat(
        "--node_rank=", flags.node_rank,
        absl::SimpleAtoi(flags.node_rank, &rank) && rank > 0
            ? ": lockstep_launch starts the processes of every host itself "
              "(over ssh, from --hosts), where torchrun runs once per node; "
              "run it once, on one machine, as node 0 (leave --node_rank "
              "out or give 0)"
            : ": not a node index (0, the only node a lockstep_launch is)"));
  }
  if (!flags.nnodes.empty()) {
    if (absl::Status ok = CheckNnodes(flags.nnodes, nodes, hosts_given);
        !ok.ok()) {
      return ok;
    }
  }
  if (flags.nproc_per_node.empty()) {
    return flags.workers.value_or(default_workers);
  }
  const std::string flag =
      absl::StrCat("--nproc_per_node=", flags.nproc_per_node);
  const std::optional<int> per_node = Positive(flags.nproc_per_node);
  if (!per_node.has_value()) {
    return absl::InvalidArgumentError(absl::StrCat(
        flag,
        ": give a positive number of workers per host (the launcher "
        "does not count the hosts' devices, so torchrun's auto, gpu and "
        "cpu are not taken)"));
  }
  if (*per_node > INT_MAX / nodes) {
    return absl::InvalidArgumentError(
        absl::StrCat(flag, ": too many workers on ", nodes, " host(s)"));
  }
  const int workers = *per_node * nodes;
  if (hosts_given) {
    for (HostSlots& host : *hosts) {
      if (host.slots_given && host.slots != *per_node) {
        return absl::InvalidArgumentError(
            absl::StrCat(flag, " puts ", *per_node,
                         " worker(s) on each host, but --hosts "
                         "gives ",
                         host.host, " ", host.slots,
                         " slot(s): leave the slots out or make them agree"));
      }
      host.slots = *per_node;
    }
  }
  if (flags.workers.has_value() && *flags.workers != workers) {
    return absl::InvalidArgumentError(
        absl::StrCat("--workers=", *flags.workers, " and ", flag,
                     " disagree: ", *per_node, " per host on ", nodes,
                     " host(s) is ", workers, " workers; give one of the two"));
  }
  return workers;
}

}  // namespace lockstep
