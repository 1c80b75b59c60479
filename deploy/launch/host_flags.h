// lockstep_launch's flags for a launch across hosts over ssh (--hosts,
// --ps_hosts, --server_port, --ssh_args, --remote_bin_dir), turned into
// the HostPlan of LaunchOptions.
#ifndef LOCKSTEP_DEPLOY_LAUNCH_HOST_FLAGS_H_
#define LOCKSTEP_DEPLOY_LAUNCH_HOST_FLAGS_H_

#include "absl/status/status.h"
#include "deploy/launch/launcher.h"

namespace lockstep {

// Sets options->hosts from the flags when --hosts is given (the workers and
// shards placed, the launcher's folder, its grace period), replaces
// options->bin_dir with --remote_bin_dir when set, and places no worker on
// a GPU unless --gpus says how many (the hosts' GPUs are not counted here).
// Needs options->workers, ps, grace_period and bin_dir set. INVALID_ARGUMENT,
// naming the flag, for a bad host list, too few slots, or a host flag
// without --hosts.
absl::Status ApplyHostFlags(LaunchOptions* options);

}  // namespace lockstep

#endif  // LOCKSTEP_DEPLOY_LAUNCH_HOST_FLAGS_H_
