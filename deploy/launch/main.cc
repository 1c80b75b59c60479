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
#include <utility>
#include <vector>

#include "absl/flags/flag.h"
#include "absl/flags/reflection.h"
#include "absl/flags/usage.h"
#include "absl/status/status.h"
#include "absl/status/statusor.h"
#include "absl/strings/str_cat.h"
#include "absl/time/time.h"
#include "common/exit_codes.h"
#include "common/flags.h"
#include "deploy/launch/host_flags.h"
#include "deploy/launch/launcher.h"
#include "deploy/launch/launcher_args.h"
#include "deploy/launch/signal_pipe.h"

ABSL_FLAG(int32_t, workers, 2,
          "Number of worker processes (ranks 0..workers-1).");
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
ABSL_FLAG(std::string, sum_order, "arrival",
          "The servers' --sum_order: arrival, or rank for the same bits in "
          "every run with three or more workers (see lockstep_server "
          "--help).");
ABSL_FLAG(double, grace_period, 10,
          "Seconds between SIGTERM and SIGKILL when stopping processes; also "
          "how long servers get to exit by themselves after the workers "
          "finish.");

namespace {

constexpr char kUsage[] = R"(runs a Lockstep job here or across hosts.

Usage: lockstep_launch [launcher flags] [worker flags] [-- worker flags]
       lockstep_launch [launcher flags] -- COMMAND [ARGS...]

Starts --ps parameter-server shards, waits until each listens, then starts
--workers workers, and prints everyone's output with each line tagged
"[ps0] ", "[worker1] ", and so on. Rank 0 reports progress (a bar when
stdout is a terminal, lines otherwise); the other ranks stay quiet.

Any argument that is not a launcher flag is passed, in order, to every
worker after the launcher's own --servers/--workers/--rank/--progress, so a
value given here wins. Launcher flags must be written --name=value (booleans
--name or --noname); everything after a bare "--" goes to the workers, which
is how to pass a worker flag that shares a launcher flag's name.

With a COMMAND after "--" (a program that is not a flag, e.g. python3
train.py), each worker runs it instead of lockstep_worker, with the job in
its environment: LOCKSTEP_RANK, LOCKSTEP_WORKERS, LOCKSTEP_SERVERS,
TF_CONFIG, LOCKSTEP_PROGRESS, the TLS files and token (LOCKSTEP_TLS_CA,
LOCKSTEP_TLS_CERT, LOCKSTEP_TLS_KEY, LOCKSTEP_TOKEN_FILE), and the Python
package beside the binaries on PYTHONPATH (docs/python.md).

With --hosts=h1:2,h2:2 the same job runs across machines: every process
over ssh, the workers filling each host's slots, the servers on --ps_hosts
(docs/operations.md, "lockstep_launch across hosts").

When any process exits non-zero or is killed, the launcher stops the others
(SIGTERM, then SIGKILL after --grace_period) and exits non-zero. Ctrl-C,
SIGTERM or SIGHUP stop everything the same way.

Exit code: 0 when every worker exited 0; 2 for bad launcher flags; N when
a process exited with code N > 0; 1 when one was killed by a signal, a
server failed to start, or the launcher hit another error; 128+N when the
launcher got signal N.

Examples: lockstep_launch --workers=4 --ps=2 --summary_json=run.json
          lockstep_launch --workers=2 -- python3 train.py --epochs=5)";

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

// The launch's options from the launcher's flags and the split command
// line, up to the folder of the binaries.
absl::StatusOr<lockstep::LaunchOptions> OptionsFromFlags(
    lockstep::SplitArgs split) {
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
  options.worker_args = std::move(split.passthrough);
  options.command = std::move(split.command);
  if (!options.command.empty() && !options.worker_args.empty()) {
    return absl::InvalidArgumentError(absl::StrCat(
        options.worker_args.front(),
        " is a lockstep_worker flag, but the workers run ",
        options.command.front(), ": give the command its arguments after it"));
  }
  return options;
}

// The flag that sets LaunchOptions' field `option`.
std::string FlagOf(absl::string_view option) {
  if (option == "tls_dir") return "--tls";
  return absl::StrCat("--", option);
}

// The hosts (host_flags.h), the token, sum order and TLS folder (beside
// the binaries by default), then the whole of `options` checked.
absl::Status FinishOptions(lockstep::LaunchOptions* options) {
  if (absl::Status hosts = lockstep::ApplyHostFlags(options); !hosts.ok()) {
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

  absl::StatusOr<lockstep::LaunchOptions> options =
      OptionsFromFlags(*std::move(split));
  if (!options.ok()) return Fail(options.status(), lockstep::kExitPermanent);
  if (options->bin_dir.empty()) {
    absl::StatusOr<std::string> dir = lockstep::ExecutableDir();
    if (!dir.ok()) return Fail(dir.status(), 1);
    options->bin_dir = *dir;
  }
  if (absl::Status status = FinishOptions(&*options); !status.ok()) {
    return Fail(status, lockstep::kExitPermanent);
  }
  return RunJob(*options);
}
