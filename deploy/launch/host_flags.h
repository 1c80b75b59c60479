// lockstep_launch's flags for a launch across hosts over ssh (--hosts,
// --ps_hosts, --server_port, --ssh_args, --remote_bin_dir) and torchrun's
// sizing flags (--nproc_per_node, --nnodes: node_flags.h), turned into the
// worker count and the HostPlan of LaunchOptions.
#ifndef LOCKSTEP_DEPLOY_LAUNCH_HOST_FLAGS_H_
#define LOCKSTEP_DEPLOY_LAUNCH_HOST_FLAGS_H_

#include "absl/status/status.h"
#include "deploy/launch/launcher.h"

namespace lockstep {

// Sets options->workers from --nproc_per_node and --nnodes when given
// (ApplyNodeFlags; `workers_given`: whether --workers was on the command
// line), options->hosts from the flags when --hosts is given (the workers
// and shards placed, the launcher's folder, its grace period), replaces
// options->bin_dir with --remote_bin_dir when set, and places no worker on
// a GPU unless --gpus says how many (the hosts' GPUs are not counted here).
// Needs options->workers, ps, grace_period and bin_dir set. INVALID_ARGUMENT,
// naming the flag, for a bad host list, too few slots, a host flag without
// --hosts, or sizing flags that disagree.
absl::Status ApplyHostFlags(LaunchOptions* options, bool workers_given);

}  // namespace lockstep

#endif  // LOCKSTEP_DEPLOY_LAUNCH_HOST_FLAGS_H_
