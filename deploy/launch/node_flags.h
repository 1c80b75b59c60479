// torchrun's way of sizing a job, --nproc_per_node, --nnodes and
// --node_rank, beside
// lockstep_launch's own --workers and --hosts: one rule turning them into
// the worker count and the hosts' slots, so a torchrun habit either means
// the same job or is refused with the reason.
#ifndef LOCKSTEP_DEPLOY_LAUNCH_NODE_FLAGS_H_
#define LOCKSTEP_DEPLOY_LAUNCH_NODE_FLAGS_H_

#include <optional>
#include <string>
#include <vector>

#include "absl/status/statusor.h"
#include "deploy/launch/host_list.h"

namespace lockstep {

// The sizing flags as given on the command line. Plain data.
struct NodeFlags {
  std::optional<int> workers;  // --workers, when given.
  std::string nproc_per_node;  // As written; empty: not given.
  std::string nnodes;          // As written; empty: not given.
  std::string node_rank;       // As written; empty: not given.
};

// The job's worker count: N * nodes under --nproc_per_node=N (a node is a
// --hosts entry; without `hosts` this machine is the one node), else
// --workers, else `default_workers`. Under --nproc_per_node with `hosts`
// (the parsed --hosts; null without it), every host's slots become N.
//
// INVALID_ARGUMENT, naming the flag and why, when --nproc_per_node is not
// a positive number (torchrun's auto, gpu and cpu included: the launcher
// does not count the hosts' devices), a host's written slots differ from
// it, or --workers disagrees with it; when --nnodes is not a positive
// number or an elastic MIN:MAX range, or differs from the number of hosts
// (1 without --hosts); when --node_rank is anything but 0 (this launcher
// starts every host's processes itself: it is node 0, and the only one).
absl::StatusOr<int> ApplyNodeFlags(const NodeFlags& flags, int default_workers,
                                   std::vector<HostSlots>* hosts);

}  // namespace lockstep

#endif  // LOCKSTEP_DEPLOY_LAUNCH_NODE_FLAGS_H_
