// lockstep_bench: benchmarks that print figures and JSON (never timed tests).
// Picks the mode and parses the command line; the flags and the modes are in
// bench_modes.cc.
#include <signal.h>

#include <cstdio>
#include <memory>
#include <string>
#include <vector>

#include "absl/flags/reflection.h"
#include "absl/flags/usage.h"
#include "absl/strings/str_join.h"
#include "common/base/malloc_tuning.h"
#include "common/flags/flags.h"
#include "deploy/launch/launcher_args.h"
#include "deploy/launch/signal_pipe.h"
#include "tests/bench/bench_modes.h"
#include "tests/bench/child_runner.h"
#include "tests/bench/comm_worker.h"

namespace lockstep {
namespace {

constexpr char kUsage[] = R"(benchmarks Lockstep; prints figures and JSON.

Usage:
  lockstep_bench comm --params=P --workers=W --ps=S [--wire_dtype=fp32|bf16|fp16]
                 [--chunk_bytes=auto] [--iters=20 --warmup=3] [--iperf3]
                 [--push_window=auto]
                 [--json=PATH]
      W workers push a fixed random gradient of P fp32 values through S real
      lockstep_server processes on loopback, synchronously; prints the median
      and p90 step, bytes moved, algorithm bandwidth, the client and server
      phases, the servers' peak RSS and, with --iperf3, the loopback floor.
  lockstep_bench e2e [--runs=3] [--workers=2 --ps=1] [worker flags...]
      trains the tutorial MLP with lockstep_launch --runs times; prints the
      median examples/s and test accuracy.
  lockstep_bench peers [--peers_dir=DIR] [--rounds=3]
      runs the PyTorch peer programs beside the matching Lockstep runs,
      alternated, and prints medians and ratios to the targets of issue 4.
  lockstep_bench conv [--model=resnet20] [--batch=32] [--rounds=3] [--threads=1]
      times forward + backward of every convolution of the model (32x32x3
      input) through its Conv2D layer on the CPU device, with the direct
      AVX-512 kernels and with im2col + OpenBLAS, alternated; prints each
      geometry's medians, which the device picks, and the per-step totals.
  lockstep_bench server [--params=25600000] [--thread_counts=1,2,...]
                 [--reps=5] [--variants=generic,avx2,avx512]
      a server shard's own work at memory speed: STREAM copy and triad, the
      checked sum of a push (fp32, bf16) and the optimizers' steps (SGD,
      momentum, Adam), through the server's code paths, per thread count and
      kernel variant, in GB/s of payload and of memory traffic.
  lockstep_bench study [--quick] [--links=loopback,sim] [--out_dir=study]
                 [--sim_rate_mbit=1000 --sim_delay_ms=0.2] [--sim_cc=reno]
                 [--noplots]
      parameter servers against all-reduce: a matrix of sync mode x workers
      x shards x model size x link (loopback, and as root a simulated
      cluster of network namespaces with tc-limited links), written as
      study.csv, study_steps.csv, study.json and PNG plots, with the cost
      model's check on the simulated links; see docs/study.md.

Exit code: 0 on success, 1 when a run failed, 2 for bad flags.)";

constexpr int kExitFailure = 1;
constexpr int kExitUsage = 2;

FlagKind LookupFlag(absl::string_view name) {
  // absl 20220623 does not register its usage flags; see the launcher.
  for (absl::string_view usage :
       {"help", "helpfull", "helpshort", "helppackage", "helpmatch", "helpon",
        "version", "only_check_args"}) {
    if (name == usage) return FlagKind::kBool;
  }
  const absl::CommandLineFlag* flag = absl::FindCommandLineFlag(name);
  if (flag == nullptr) return FlagKind::kUnknown;
  return flag->IsOfType<bool>() ? FlagKind::kBool : FlagKind::kValued;
}

int Main(int argc, char** argv) {
  const bool worker = argc > 1 && std::string(argv[1]) == "comm-worker";
  if (worker) PrepareGoSignal();
  absl::SetProgramUsageMessage(kUsage);
  if (argc < 2 || argv[1][0] == '-') {
    ParseFlags(argc, argv, {"tests/bench/"});  // Handles --help.
    std::fprintf(stderr,
                 "lockstep_bench: name a mode: comm, e2e, peers, conv, server "
                 "or study\n");
    return kExitUsage;
  }
  const std::string mode = argv[1];
  std::vector<std::string> args = {argv[0]};
  for (int i = 2; i < argc; ++i) args.push_back(argv[i]);
  absl::StatusOr<SplitArgs> split = SplitLauncherArgs(args, LookupFlag);
  if (!split.ok()) {
    std::fprintf(stderr, "lockstep_bench: %s\n",
                 std::string(split.status().message()).c_str());
    return kExitUsage;
  }
  std::vector<char*> own;
  for (std::string& arg : split->launcher) own.push_back(arg.data());
  own.push_back(nullptr);
  ParseFlags(static_cast<int>(own.size()) - 1, own.data(), {"tests/bench/"});

  absl::Status status;
  if (worker) {
    absl::StatusOr<CommWorkerOptions> options = ParseCommWorkerOptions();
    status = options.ok() ? RunCommWorker(*options) : options.status();
  } else if (mode == "counters") {
    // Hidden: run by the bench on a simulated host to read servers there.
    status = RunCountersFromFlags();
  } else {
    // A closed stdout must not kill us while children run.
    signal(SIGPIPE, SIG_IGN);
    absl::StatusOr<std::unique_ptr<SignalPipe>> signals =
        SignalPipe::Create({SIGINT, SIGTERM, SIGHUP});
    if (!signals.ok()) {
      status = signals.status();
    } else {
      AdoptOrphans();
      status = RunMode(mode, split->passthrough, (*signals)->read_fd(),
                       absl::StrJoin(argv + 0, argv + argc, " "));
      ReapOrphans();
    }
  }
  if (status.ok()) return 0;
  std::fprintf(stderr, "lockstep_bench %s: %s\n", mode.c_str(),
               status.ToString().c_str());
  return absl::IsInvalidArgument(status) ? kExitUsage : kExitFailure;
}

}  // namespace
}  // namespace lockstep

// Tuned as the server and worker are, so that comm-worker steps like a
// real worker.
int main(int argc, char** argv) {
  lockstep::TuneMallocForSteps();
  return lockstep::Main(argc, argv);
}
