// lockstep_launch: runs a Lockstep job on this machine or across hosts over
// ssh, like torchrun or horovodrun. Flags are parsed here, once, into
// LaunchOptions; the job logic is in launcher.cc.
#include <signal.h>
#include <stdio.h>
#include <unistd.h>

#include <cstdint>
#include <memory>
#include <optional>
#include <string>
#include <tuple>
#include <utility>
#include <vector>

#include "absl/flags/flag.h"
#include "absl/flags/reflection.h"
#include "absl/flags/usage.h"
#include "absl/status/status.h"
#include "absl/status/statusor.h"
#include "absl/strings/str_cat.h"
#include "absl/time/time.h"
#include "common/base/exit_codes.h"
#include "common/flags/flags.h"
#include "common/optim/sum_order.h"
#include "deploy/launch/flag_probe.h"
#include "deploy/launch/flag_routing.h"
#include "deploy/launch/host_flags.h"
#include "deploy/launch/launcher.h"
#include "deploy/launch/launcher_args.h"
#include "deploy/launch/signal_pipe.h"

ABSL_FLAG(int32_t, workers, 2,
          "Number of worker processes (ranks 0..workers-1); "
          "--nproc_per_node may say it instead.");
ABSL_FLAG(int32_t, ps, 1,
          "Number of parameter-server shards. Each is started with "
          "--shard=i --num_shards=N when N > 1, and every worker gets all "
          "their addresses in --servers.");
ABSL_FLAG(std::string, bin_dir, "",
          "Directory holding lockstep_server and lockstep_worker. Empty: the "
          "directory of this lockstep_launch executable.");
ABSL_FLAG(std::string, summary_json, "",
          "If set, passed as --summary_json to worker rank 0 only.");
ABSL_FLAG(double, startup_timeout, 60,
          "Seconds to wait for every server to write its port file before "
          "giving up.");
ABSL_FLAG(int32_t, gpus, -1,
          "GPUs to place workers on, round-robin (worker r gets --gpu=r % "
          "gpus; several workers may share one). -1: count them with "
          "nvidia-smi, cut to those CUDA_VISIBLE_DEVICES names; 0: pass no "
          "--gpu (each worker picks its device).");
ABSL_FLAG(bool, tls, false,
          "Run the job over mutual TLS with the certificates in --tls_dir "
          "(made by deploy/tls/make_certs.sh): servers get "
          "--tls_cert/--tls_key/--tls_ca and --admin_identities="
          "lockstep-admin, workers their client certificate.");
ABSL_FLAG(std::string, tls_dir, "",
          "With --tls: the certificate folder. Default: tls/ beside the "
          "bin directory (build/tls, where train.sh --tls makes them).");
ABSL_FLAG(std::string, token_file, "",
          "A bearer-token file passed as --token_file to every server and "
          "worker.");
ABSL_FLAG(std::string, sum_order,
          std::string(lockstep::SumOrderName(lockstep::SumOrder::kArrival)),
          "The servers' --sum_order: arrival, or rank for the same bits in "
          "every run with three or more workers (see lockstep_server "
          "--help).");
ABSL_FLAG(int32_t, metrics_port_base, 0,
          "Serve each process's Prometheus metrics on its own port: server "
          "shard i on N+i, worker r on N+ps+r (0: off). The URLs are printed "
          "at start.");
ABSL_FLAG(int32_t, health_port_base, 0,
          "Serve each process's plaintext grpc.health.v1 on its own port "
          "(--health_port), numbered as --metrics_port_base's (0: off).");
ABSL_FLAG(std::string, trace_dir, "",
          "Each process writes a Chrome trace here: psI.json and "
          "workerR.json (an existing folder; empty: off). Merge them with "
          "lockstep_ctl merge-traces.");
ABSL_FLAG(double, grace_period, 10,
          "Seconds between SIGTERM and SIGKILL when stopping processes; also "
          "how long servers get to exit by themselves after the workers "
          "finish.");

namespace {

constexpr char kUsage[] = R"(runs a Lockstep job here or across hosts.

Usage: lockstep_launch [launcher, server and worker flags] [-- worker flags]
       lockstep_launch [launcher and server flags] -- COMMAND [ARGS...]

Starts --ps parameter-server shards, waits until each listens, then starts
--workers workers, and prints everyone's output with each line tagged
"[ps0] ", "[worker1] ", and so on. Rank 0 reports progress (a bar when
stdout is a terminal, lines otherwise); the other ranks stay quiet. At start
it prints the servers' addresses and a lockstep_ctl status command to paste.

Flags reach the process that takes them: a launcher flag (below) the
launcher; any other flag lockstep_worker takes every worker, and one only
lockstep_server takes (--checkpoint_dir, --on_worker_loss, ...) every
server, each after the launcher's own flags for it, so a value given here
wins. A flag none of them takes stops the launch before anything starts,
with the nearest known flag ("did you mean --epochs?"); so do flags the
worker or server refuses. To send a flag to one side explicitly (one both
take, such as --step_timeout_s, goes to the workers), write
--server_flag=--NAME=VALUE or --worker_flag=--NAME=VALUE (repeatable);
everything after a bare "--" goes to the workers too. Launcher flags must
be written --name=value (booleans --name or --noname).

With a COMMAND after "--" (a program that is not a flag, e.g. python3
train.py), each worker runs it instead of lockstep_worker, with the job in
its environment: LOCKSTEP_RANK, LOCKSTEP_WORKERS, LOCKSTEP_SERVERS,
RANK, WORLD_SIZE, LOCAL_RANK, LOCAL_WORLD_SIZE, TF_CONFIG, LOCKSTEP_PROGRESS, the TLS files and token (LOCKSTEP_TLS_CA,
LOCKSTEP_TLS_CERT, LOCKSTEP_TLS_KEY, LOCKSTEP_TOKEN_FILE), and the Python
package beside the binaries on PYTHONPATH (docs/python.md).

With --hosts=h1:2,h2:2 the same job runs across machines: every process
over ssh, the workers filling each host's slots, the servers on --ps_hosts
(docs/operations.md, "lockstep_launch across hosts").

torchrun's habits work too: --nproc_per_node=N is N workers on each host
(--workers=N here, N per --hosts entry across hosts), --nnodes=K is checked
against the hosts, and a COMMAND also finds RANK, WORLD_SIZE, LOCAL_RANK
(its index among the workers of its host: the GPU to use) and
LOCAL_WORLD_SIZE. --node_rank takes only 0: this launcher starts every
host's processes itself, where torchrun runs once per node.

When any process exits non-zero or is killed, the launcher stops the others
(SIGTERM, then SIGKILL after --grace_period) and exits non-zero. Ctrl-C,
SIGTERM or SIGHUP stop everything the same way.

Exit code: 0 when every worker exited 0; 2 for bad flags (nothing started);
N when a process exited with code N > 0; 1 when one was killed by a
signal, a server failed to start, or the launcher hit another error; 128+N
when the launcher got signal N.

Examples: lockstep_launch --workers=4 --ps=2 --summary_json=run.json
          lockstep_launch --checkpoint_dir=/tmp/ckpt --metrics_port_base=9100
          lockstep_launch --workers=2 -- python3 train.py --epochs=5
          lockstep_launch --nproc_per_node=4 -- python3 train.py)";

lockstep::FlagKind LookupFlag(absl::string_view name) {
  // absl 20220623 parses its usage flags by name (DeduceUsageFlags) rather
  // than registering them, so the registry does not know them. Each may take
  // a value (--help=substring), hence kBool: both forms go to the launcher.
  for (absl::string_view usage :
       {"help", "helpfull", "helpshort", "helppackage", "helpmatch", "helpon",
        "version", "only_check_args"}) {
    if (name == usage) return lockstep::FlagKind::kBool;
  }
  const absl::CommandLineFlag* flag = absl::FindCommandLineFlag(name);
  if (flag == nullptr) return lockstep::FlagKind::kUnknown;
  return flag->IsOfType<bool>() ? lockstep::FlagKind::kBool
                                : lockstep::FlagKind::kValued;
}

// "lockstep_launch: MESSAGE" on stderr; returns `code`.
int Fail(const absl::Status& status, int code) {
  fprintf(stderr, "lockstep_launch: %s\n",
          std::string(status.message()).c_str());
  return code;
}

// The launch's options from the launcher's flags and the command, up to
// the folder of the binaries and the routed arguments.
lockstep::LaunchOptions OptionsFromFlags(lockstep::SplitArgs* split) {
  lockstep::LaunchOptions options;
  options.workers = absl::GetFlag(FLAGS_workers);
  options.ps = absl::GetFlag(FLAGS_ps);
  options.bin_dir = absl::GetFlag(FLAGS_bin_dir);
  options.summary_json = absl::GetFlag(FLAGS_summary_json);
  options.startup_timeout = absl::Seconds(absl::GetFlag(FLAGS_startup_timeout));
  options.grace_period = absl::Seconds(absl::GetFlag(FLAGS_grace_period));
  options.progress_bar = isatty(STDOUT_FILENO) == 1;
  options.gpus = absl::GetFlag(FLAGS_gpus);
  if (options.gpus < 0) options.gpus = lockstep::CountVisibleGpus();
  options.metrics_port_base = absl::GetFlag(FLAGS_metrics_port_base);
  options.health_port_base = absl::GetFlag(FLAGS_health_port_base);
  options.trace_dir = absl::GetFlag(FLAGS_trace_dir);
  options.command = std::move(split->command);
  return options;
}

// The launcher's own flag names, for "did you mean".
std::vector<std::string> LauncherFlagNames() {
  std::vector<std::string> names = {"server_flag", "worker_flag"};
  for (const auto& [name, flag] : absl::GetAllFlags()) {
    names.emplace_back(name);
  }
  return names;
}

// Has the server, and the worker unless the workers run a command, check
// the command lines they will get (--validate_only): INVALID_ARGUMENT with
// what the first to refuse wrote.
absl::Status CheckCommandLines(const lockstep::LaunchOptions& options) {
  std::vector<std::pair<const char*, std::vector<std::string>>> lines = {
      {"lockstep_server", lockstep::ServerArgv(options, 0, "/dev/null")}};
  if (options.command.empty()) {
    lines.emplace_back("lockstep_worker",
                       lockstep::WorkerArgv(options, 0, "127.0.0.1:1"));
  }
  for (const auto& [binary, argv] : lines) {
    if (absl::Status ok = lockstep::ValidateCommandLine(argv); !ok.ok()) {
      return absl::InvalidArgumentError(absl::StrCat(
          binary, " refuses its flags; nothing was started:\n", ok.message()));
    }
  }
  return absl::OkStatus();
}

// Sends the arguments that are not the launcher's to the servers or the
// workers (flag_routing.h), then has the binaries check the command lines
// they will get: INVALID_ARGUMENT, before anything starts, when a flag is
// no one's or a binary refuses its own.
absl::Status RouteArguments(lockstep::SplitArgs* split,
                            lockstep::LaunchOptions* options) {
  const std::string server_bin = options->bin_dir + "/lockstep_server";
  const std::string worker_bin = options->bin_dir + "/lockstep_worker";
  absl::StatusOr<lockstep::FlagTable> server = lockstep::ListFlags(server_bin);
  if (!server.ok()) return server.status();
  absl::StatusOr<lockstep::FlagTable> worker = lockstep::ListFlags(worker_bin);
  if (!worker.ok()) return worker.status();
  absl::StatusOr<lockstep::RoutedArgs> routed = lockstep::RouteArgs(
      split->passthrough, *server, *worker, LauncherFlagNames());
  if (!routed.ok()) return routed.status();
  options->server_args = std::move(routed->server);
  options->worker_args = std::move(routed->worker);
  for (std::string& arg : split->server_flags) {
    options->server_args.push_back(std::move(arg));
  }
  for (std::string& arg : split->worker_flags) {
    options->worker_args.push_back(std::move(arg));
  }
  for (const auto& [args, count, base] :
       {std::make_tuple(&options->worker_args, options->workers, "workers"),
        std::make_tuple(&options->server_args, options->ps, "servers")}) {
    const std::string port = lockstep::FirstPortFlag(*args);
    if (count > 1 && !port.empty()) {
      return absl::InvalidArgumentError(absl::StrCat(
          "--", port, " would give all ", count, " ", base,
          " the same port; --", port, "_base=N gives each process its own"));
    }
  }
  if (!options->command.empty() && !options->worker_args.empty()) {
    return absl::InvalidArgumentError(absl::StrCat(
        options->worker_args.front(),
        " is a lockstep_worker flag, but the workers run ",
        options->command.front(), ": give the command its arguments after it"));
  }
  return CheckCommandLines(*options);
}

// The flag that sets LaunchOptions' field `option`.
std::string FlagOf(absl::string_view option) {
  if (option == "tls_dir") return "--tls";
  return absl::StrCat("--", option);
}

// Whether `launcher_args` (SplitArgs::launcher) set the flag `name`.
bool Given(const std::vector<std::string>& launcher_args,
           absl::string_view name) {
  for (const std::string& arg : launcher_args) {
    absl::string_view flag;
    bool has_value = false;
    if (lockstep::ParseFlagSyntax(arg, &flag, &has_value) && flag == name) {
      return true;
    }
  }
  return false;
}

// The worker count and hosts (host_flags.h; `workers_given`: whether
// --workers was), the token, sum order and TLS folder (beside the binaries
// by default), then the whole of `options` checked.
absl::Status FinishOptions(lockstep::LaunchOptions* options,
                           bool workers_given) {
  if (absl::Status hosts = lockstep::ApplyHostFlags(options, workers_given);
      !hosts.ok()) {
    return hosts;
  }
  options->token_file = absl::GetFlag(FLAGS_token_file);
  options->sum_order = absl::GetFlag(FLAGS_sum_order);
  if (absl::GetFlag(FLAGS_tls)) {
    options->tls_dir = absl::GetFlag(FLAGS_tls_dir);
    if (options->tls_dir.empty()) {
      options->tls_dir = options->bin_dir + "/../tls";
    }
  } else if (!absl::GetFlag(FLAGS_tls_dir).empty()) {
    return absl::InvalidArgumentError("--tls_dir needs --tls");
  }
  std::optional<lockstep::InvalidLaunchOption> invalid =
      lockstep::ValidateLaunchOptions(*options);
  if (!invalid.has_value()) return absl::OkStatus();
  return absl::InvalidArgumentError(
      absl::StrCat(FlagOf(invalid->option), ": ", invalid->problem));
}

// Runs the job with SIGINT, SIGTERM and SIGHUP turned into its stop.
int RunJob(const lockstep::LaunchOptions& options) {
  // A closed stdout must not kill the launcher while it has children to stop.
  signal(SIGPIPE, SIG_IGN);
  absl::StatusOr<std::unique_ptr<lockstep::SignalPipe>> signals =
      lockstep::SignalPipe::Create({SIGINT, SIGTERM, SIGHUP});
  if (!signals.ok()) return Fail(signals.status(), 1);
  lockstep::ProcessGroupOptions group;
  group.output_fd = STDOUT_FILENO;
  group.interrupt_fd = (*signals)->read_fd();
  return lockstep::Launch(options, group);
}

}  // namespace

int main(int argc, char** argv) {
  absl::SetProgramUsageMessage(kUsage);

  absl::StatusOr<lockstep::SplitArgs> split = lockstep::SplitLauncherArgs(
      std::vector<std::string>(argv, argv + argc), LookupFlag);
  if (!split.ok()) return Fail(split.status(), lockstep::kExitPermanent);
  std::vector<char*> launcher_argv;
  for (std::string& arg : split->launcher) launcher_argv.push_back(arg.data());
  launcher_argv.push_back(nullptr);
  lockstep::ParseFlags(static_cast<int>(split->launcher.size()),
                       launcher_argv.data(), {"deploy/launch/"});

  lockstep::LaunchOptions options = OptionsFromFlags(&*split);
  if (options.bin_dir.empty()) {
    absl::StatusOr<std::string> dir = lockstep::ExecutableDir();
    if (!dir.ok()) return Fail(dir.status(), 1);
    options.bin_dir = *dir;
  }
  if (absl::Status status =
          FinishOptions(&options, Given(split->launcher, "workers"));
      !status.ok()) {
    return Fail(status, lockstep::kExitPermanent);
  }
  if (absl::Status status = RouteArguments(&*split, &options); !status.ok()) {
    return Fail(status, absl::IsInvalidArgument(status)
                            ? lockstep::kExitPermanent
                            : lockstep::kExitFailure);
  }
  return RunJob(options);
}
