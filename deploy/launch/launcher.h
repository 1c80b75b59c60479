// lockstep_launch's job logic: servers first, then workers, then shutdown.
#ifndef LOCKSTEP_DEPLOY_LAUNCH_LAUNCHER_H_
#define LOCKSTEP_DEPLOY_LAUNCH_LAUNCHER_H_

#include <optional>
#include <string>
#include <vector>

#include "absl/status/status.h"
#include "absl/status/statusor.h"
#include "absl/time/time.h"
#include "common/optim/sum_order.h"
#include "deploy/launch/host_list.h"
#include "deploy/launch/process_group.h"

namespace lockstep {

// Everything a launch needs, parsed once from flags in main.cc.
struct LaunchOptions {
  int workers = 2;
  int ps = 1;                // Parameter-server shards.
  std::string bin_dir;       // Holds lockstep_server and lockstep_worker.
  std::string summary_json;  // For rank 0; empty: none.
  absl::Duration startup_timeout = absl::Seconds(60);
  absl::Duration grace_period = absl::Seconds(10);
  bool progress_bar = false;  // Rank 0 draws a bar rather than lines.
  // GPUs to place workers on round-robin (worker r gets --gpu=r % gpus,
  // several may share one); 0: none, the workers choose their device.
  int gpus = 0;
  std::vector<std::string> worker_args;  // Passed through, after ours.
  // Passed to every server after ours (flag_routing.h routes them).
  std::vector<std::string> server_args;
  // Metrics ports from here on: server shard i gets --metrics_port=base+i,
  // worker r base+ps+r. 0: none.
  int metrics_port_base = 0;
  // The same for grpc.health.v1 ports (--health_port). 0: none.
  int health_port_base = 0;
  // Each process writes its Chrome trace here: ps<i>.json, worker<r>.json.
  // Empty: none.
  std::string trace_dir;
  // Run this program (a path, or a name looked up in PATH) with its
  // arguments as every worker instead of lockstep_worker, the job in its
  // environment (WorkerEnv). Empty: lockstep_worker.
  std::vector<std::string> command;
  // Mutual TLS with the files deploy/tls/make_certs.sh writes in this folder
  // (ca.pem, server.pem/.key, worker.pem/.key; the admin identity is
  // "lockstep-admin"). Empty: plaintext on loopback.
  std::string tls_dir;
  // Passed as --token_file to every server and worker; empty: none.
  std::string token_file;
  // The servers' --sum_order (a SumOrderName: "arrival" or "rank"); passed
  // on when not the default.
  std::string sum_order = std::string(SumOrderName(SumOrder::kArrival));
  // Across hosts over ssh (--hosts): where each process runs. Default:
  // everything on this machine.
  HostPlan hosts;
};

// A LaunchOptions field out of range: which, and what is wrong with it.
struct InvalidLaunchOption {
  std::string option;   // The field's name: "workers", "tls_dir", ...
  std::string problem;  // E.g. "must be at least 1".
};

// The first field of `options` out of range (a TLS folder whose files
// cannot be read included); none when all are fine. The caller names the
// field as its user knows it.
std::optional<InvalidLaunchOption> ValidateLaunchOptions(
    const LaunchOptions& options);

// The first per-process option (metrics_port_base, health_port_base,
// trace_dir) out of range, or the two port ranges overlapping; none when
// all are fine. ValidateLaunchOptions checks it too.
std::optional<InvalidLaunchOption> ValidatePerProcessOptions(
    const LaunchOptions& options);

// Logs, once the servers listen at `addresses`, how to reach the job: a
// lockstep_ctl status command ready to paste (with the TLS files and token
// it needs) and, when asked for, the metrics URLs, health ports and trace
// files.
void LogHowToReachTheJob(const LaunchOptions& options,
                         const std::vector<std::string>& addresses,
                         ProcessGroup& group);

// The directory holding the running executable (from /proc/self/exe).
absl::StatusOr<std::string> ExecutableDir();

// Shard `shard`'s command line, options.server_args last. The shard flags
// are added only when there is more than one shard, so a single-shard job
// needs nothing beyond the basic server contract.
std::vector<std::string> ServerArgv(const LaunchOptions& options, int shard,
                                    const std::string& port_file);

// Worker `rank`'s command line: our flags first, then options.worker_args,
// so that a flag the user repeats wins (absl keeps the last value).
std::vector<std::string> WorkerArgv(const LaunchOptions& options, int rank,
                                    const std::string& servers);

// What worker `rank` finds in its environment, for a command that is not
// lockstep_worker ("NAME=VALUE" entries): LOCKSTEP_RANK, LOCKSTEP_WORKERS,
// LOCKSTEP_SERVERS; the same as torchrun names them: RANK, WORLD_SIZE, and
// LOCAL_RANK and LOCAL_WORLD_SIZE among the workers of its host
// (LocalRankOf; by torch's convention LOCAL_RANK is the GPU to use);
// TF_CONFIG (the same cluster in TensorFlow's form, "ps" and "worker"
// lists and this task), LOCKSTEP_PROGRESS (bar, lines or none),
// LOCKSTEP_GPU when GPUs are assigned (--gpus round-robin over the ranks,
// which is LOCAL_RANK on one host when there are enough GPUs),
// LOCKSTEP_SUMMARY_JSON for rank 0, the TLS files and token as
// LOCKSTEP_TLS_CA/_CERT/_KEY and LOCKSTEP_TOKEN_FILE, PYTHONUNBUFFERED=1 (so
// output arrives as it is printed), and, when `python_dir` (the Python
// package beside the binaries) is not empty, PYTHONPATH: it, then
// `inherited_pythonpath`.
std::vector<std::string> WorkerEnv(const LaunchOptions& options, int rank,
                                   const std::vector<std::string>& servers,
                                   const std::string& python_dir,
                                   const char* inherited_pythonpath);

// The Python package beside the binaries (bin_dir/../python, resolved), for
// a COMMAND's PYTHONPATH; empty when there is none or no command.
std::string PythonDir(const LaunchOptions& options);

// "PATH=" `bin_dir` (resolved), then `inherited_path`: a COMMAND on this
// machine finds the launcher's own folder first, so that in a venv not
// activated `lockstep_launch -- python train.py` runs the venv's python
// (and lockstep_ctl), as torchrun runs its own interpreter.
std::string PathWithBinDir(const std::string& bin_dir,
                           const char* inherited_path);

// GPUs the workers can use: the lines of `nvidia-smi -L` (0 when it is
// absent or fails), cut to VisibleGpus' count when CUDA_VISIBLE_DEVICES is
// set (nvidia-smi lists every GPU regardless).
int CountVisibleGpus();

// How many of `installed` GPUs CUDA shows a process whose
// CUDA_VISIBLE_DEVICES is `visible` (null: unset, all of them), as CUDA
// reads the list: the entries before the first invalid one (empty, not a
// number, negative, not installed, repeated, or of another kind than the
// first: ordinals, GPU-... or MIG-... UUIDs), and one MIG device at most.
// UUIDs are not checked against the machine's.
int VisibleGpus(int installed, const char* visible);

// The port a server wrote to `path` ("<decimal>\n", written by rename so it
// is never seen half-written). NOT_FOUND while the file does not exist.
absl::StatusOr<int> ReadPortFile(const std::string& path);

// Runs the job: starts the servers, waits for their port files, starts the
// workers, pumps everyone's output, and stops everything. Returns the exit
// code for the launcher:
//   0        every worker exited 0 (servers still running afterwards are
//            stopped and do not count);
//   N        a child exited with code N > 0 by itself;
//   1        a child was killed by a signal, a server exited or timed out
//            before listening, or the launcher could not start something;
//   128 + N  the launcher received signal N (read from interrupt_fd).
int Launch(const LaunchOptions& options, const ProcessGroupOptions& group);

}  // namespace lockstep

#endif  // LOCKSTEP_DEPLOY_LAUNCH_LAUNCHER_H_
