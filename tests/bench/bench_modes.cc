// lockstep_bench's flags and its modes' options from them: each mode's
// flags checked and turned into its options struct, run, and its figures
// printed and written as JSON (--json). main.cc picks the mode.
#include "tests/bench/bench_modes.h"

#include <unistd.h>

#include <climits>
#include <cstdio>
#include <string>
#include <vector>

#include "absl/flags/flag.h"
#include "absl/strings/numbers.h"
#include "absl/strings/str_cat.h"
#include "absl/strings/str_join.h"
#include "absl/strings/str_split.h"
#include "common/base/status_macros.h"
#include "common/formats/json_writer.h"
#include "common/model/model_signature.h"
#include "common/security/tls_flags.h"
#include "deploy/launch/launcher.h"
#include "tests/bench/comm_bench.h"
#include "tests/bench/conv_bench.h"
#include "tests/bench/e2e_bench.h"
#include "tests/bench/loopback.h"
#include "tests/bench/peers_bench.h"
#include "tests/bench/server_bench.h"
#include "tests/bench/server_counters.h"
#include "tests/bench/study.h"

ABSL_FLAG(int64_t, params, 25'600'000,
          "comm: fp32 parameters (one tensor) pushed by every worker.");
ABSL_FLAG(int, workers, 2, "comm, e2e: worker processes.");
ABSL_FLAG(int, ps, 1, "comm, e2e: parameter-server shards.");
ABSL_FLAG(std::string, wire_dtype, "fp32",
          "comm: encoding on the wire, fp32 | bf16 | fp16.");
ABSL_FLAG(std::string, chunk_bytes, "auto",
          "comm, study: largest chunk of the PS runs: auto (the workers' "
          "default, common/model/chunk_plan.h) or fp32 bytes, at most 32 MiB.");
ABSL_FLAG(int, iters, 20, "comm: timed steps.");
ABSL_FLAG(std::string, push_window, "auto",
          "comm: gradient chunks each worker has in flight to each shard "
          "(0: all; auto: the worker's default).");
ABSL_FLAG(int, warmup, 3, "comm: untimed steps first.");
ABSL_FLAG(std::string, sum_order, "arrival",
          "comm: the servers' --sum_order (arrival or rank).");
ABSL_FLAG(bool, iperf3, false,
          "comm: also measure the loopback floor with iperf3 --bidir.");
ABSL_FLAG(int, runs, 3, "e2e: training runs.");
ABSL_FLAG(std::string, peers_dir, LOCKSTEP_SOURCE_DIR "/tests/bench/peers",
          "peers: folder of the PyTorch peer programs (torch_peers.py).");
ABSL_FLAG(int, rounds, 3,
          "peers: alternated rounds of every program; conv: of every layer.");
ABSL_FLAG(std::string, model, "resnet20", "conv: cnn | resnet20 | resnet50.");
ABSL_FLAG(int, batch, 32, "conv: images per pass.");
ABSL_FLAG(int, threads, 1, "conv: the CPU devices' threads.");
ABSL_FLAG(int, large_iters, 15, "peers: timed steps of the 25.6M runs.");
ABSL_FLAG(int, small_iters, 1000, "peers: timed steps of the 101,770 runs.");
ABSL_FLAG(std::string, thread_counts, "",
          "server: thread counts to time, comma-separated; default 1, 2, 4, "
          "... and the cores this process may use.");
ABSL_FLAG(int, reps, 5, "server: timed passes per figure.");
ABSL_FLAG(std::string, variants, "",
          "server: kernel variants to time at one thread; default all this "
          "CPU runs.");
ABSL_FLAG(std::string, json, "", "Also write the figures here as JSON.");
ABSL_FLAG(double, timeout_s, 600,
          "Give up on a comm run, an e2e run or a peer program after this "
          "many seconds.");
ABSL_FLAG(std::string, allreduce_backend, "",
          "comm: empty: push through the servers; gloo | grpc-ring: "
          "all-reduce among the workers (--ps=1 then only hosts the "
          "rendezvous).");
ABSL_FLAG(bool, quick, false, "study: a small matrix on a small model.");
ABSL_FLAG(std::string, links, "",
          "study: loopback,sim or one of them. Default: loopback, plus the "
          "simulated cluster when run as root.");
ABSL_FLAG(double, sim_rate_mbit, 1000,
          "study: each simulated host's bandwidth, each way, in Mbit/s.");
ABSL_FLAG(double, sim_delay_ms, 0.2,
          "study: one-way delay added to each simulated link (needs netem).");
ABSL_FLAG(std::string, sim_name, "lss", "study: the cluster's --name.");
ABSL_FLAG(std::string, sim_cc, "reno",
          "study: the simulated hosts' TCP congestion control (cluster.sh "
          "--cc): reno, bbr, another the kernel allows a namespace, or "
          "default (the kernel's own).");
ABSL_FLAG(std::string, cluster_script,
          LOCKSTEP_SOURCE_DIR "/deploy/sim/cluster.sh",
          "study: the simulated cluster's script.");
ABSL_FLAG(std::string, kinds, "",
          "study: only these kinds of run (comm, mlp, straggler, rounds), "
          "comma-separated; default all.");
ABSL_FLAG(bool, plots, true, "study: draw PNGs with matplotlib.");
ABSL_FLAG(std::string, python, "/usr/bin/python3",
          "study: a Python with matplotlib for the plots.");
ABSL_FLAG(std::string, plot_script,
          LOCKSTEP_SOURCE_DIR "/tests/bench/study_plots.py",
          "study: the plotting script.");
ABSL_FLAG(std::string, study_data_dir, "/usr/share/datasets/fashion-mnist",
          "study: Fashion-MNIST for the MLP runs (synthetic data if absent).");
ABSL_FLAG(double, study_timeout_s, 1500,
          "study: stop starting runs after this many seconds.");
// The hidden comm-worker and counters modes' own flags.
ABSL_FLAG(std::string, servers, "", "comm-worker, counters: shard addresses.");
ABSL_FLAG(int, rank, -1, "comm-worker: this worker's rank.");
ABSL_FLAG(std::string, host, "127.0.0.1",
          "comm-worker: the address all-reduce peers reach it at.");
ABSL_FLAG(std::string, out_dir, "",
          "comm-worker, counters: ready and result files; study: where the "
          "CSV, JSON and plots go (default ./study).");

namespace lockstep {
namespace {

// What every mode is run with besides its flags.
struct ModeContext {
  const std::vector<std::string>& extra;  // Arguments after the flags.
  int interrupt_fd;
  std::string command;  // The bench's own command line.
  std::string self;     // This executable.
  std::string bin_dir;  // Its folder.
};

absl::StatusOr<std::string> SelfExe() {
  char buf[PATH_MAX];
  const ssize_t n = readlink("/proc/self/exe", buf, sizeof(buf) - 1);
  if (n <= 0) return absl::InternalError("cannot read /proc/self/exe");
  return std::string(buf, static_cast<size_t>(n));
}

absl::Status CheckAtLeast(absl::string_view flag, int64_t value, int64_t min) {
  if (value >= min) return absl::OkStatus();
  return absl::InvalidArgumentError(
      absl::StrCat("--", flag, " must be at least ", min, ", got ", value));
}

absl::StatusOr<int64_t> ChunkBytesFlag() {
  absl::StatusOr<int64_t> bytes =
      ParseChunkBytes(absl::GetFlag(FLAGS_chunk_bytes), int64_t{32} << 20);
  if (!bytes.ok()) {
    return absl::InvalidArgumentError(
        absl::StrCat("--chunk_bytes: ", bytes.status().message()));
  }
  return *bytes;
}
absl::StatusOr<CommOptions> ParseCommOptions() {
  CommOptions o;
  o.params = absl::GetFlag(FLAGS_params);
  o.workers = absl::GetFlag(FLAGS_workers);
  o.ps = absl::GetFlag(FLAGS_ps);
  ASSIGN_OR_RETURN(o.wire_dtype,
                   ParseWireDType(absl::GetFlag(FLAGS_wire_dtype)));
  ASSIGN_OR_RETURN(o.chunk_bytes, ChunkBytesFlag());
  o.iters = absl::GetFlag(FLAGS_iters);
  o.warmup = absl::GetFlag(FLAGS_warmup);
  ASSIGN_OR_RETURN(o.push_window,
                   ParsePushWindow(absl::GetFlag(FLAGS_push_window)));
  o.iperf3 = absl::GetFlag(FLAGS_iperf3);
  o.allreduce = absl::GetFlag(FLAGS_allreduce_backend);
  o.sum_order = absl::GetFlag(FLAGS_sum_order);
  if (!o.allreduce.empty() && o.ps != 1) {
    return absl::InvalidArgumentError(
        "--allreduce_backend needs --ps=1 (the server only hosts the "
        "rendezvous)");
  }
  if (!o.allreduce.empty() && o.wire_dtype != WireDType::kFloat32) {
    // The all-reduce workers move fp32 whatever the flag: refuse rather
    // than label an fp32 run bf16.
    return absl::InvalidArgumentError(
        "--allreduce_backend moves fp32 gradients: --wire_dtype must be fp32");
  }
  o.timeout = absl::Seconds(absl::GetFlag(FLAGS_timeout_s));
  RETURN_IF_ERROR(CheckAtLeast("workers", o.workers, 1));
  RETURN_IF_ERROR(CheckAtLeast("ps", o.ps, 1));
  RETURN_IF_ERROR(CheckAtLeast("params", o.params, o.ps));
  RETURN_IF_ERROR(CheckAtLeast("iters", o.iters, 1));
  RETURN_IF_ERROR(CheckAtLeast("warmup", o.warmup, 0));
  if (o.iperf3 && !o.allreduce.empty()) {
    // The floor is the servers' bytes over loopback; an all-reduce moves
    // none through its server.
    std::fprintf(stderr,
                 "lockstep_bench: no loopback floor for --allreduce_backend; "
                 "measuring without --iperf3\n");
    o.iperf3 = false;
  }
  if (o.iperf3 && access(kIperf3, X_OK) != 0) {
    std::fprintf(stderr, "lockstep_bench: no %s; measuring without --iperf3\n",
                 kIperf3);
    o.iperf3 = false;
  }
  return o;
}

}  // namespace

absl::StatusOr<CommWorkerOptions> ParseCommWorkerOptions() {
  CommWorkerOptions o;
  o.servers =
      absl::StrSplit(absl::GetFlag(FLAGS_servers), ',', absl::SkipEmpty());
  o.rank = absl::GetFlag(FLAGS_rank);
  o.workers = absl::GetFlag(FLAGS_workers);
  o.params = absl::GetFlag(FLAGS_params);
  ASSIGN_OR_RETURN(o.wire_dtype,
                   ParseWireDType(absl::GetFlag(FLAGS_wire_dtype)));
  ASSIGN_OR_RETURN(o.chunk_bytes, ChunkBytesFlag());
  o.warmup = absl::GetFlag(FLAGS_warmup);
  o.iters = absl::GetFlag(FLAGS_iters);
  ASSIGN_OR_RETURN(o.push_window,
                   ParsePushWindow(absl::GetFlag(FLAGS_push_window)));
  o.out_dir = absl::GetFlag(FLAGS_out_dir);
  o.allreduce = absl::GetFlag(FLAGS_allreduce_backend);
  o.host = absl::GetFlag(FLAGS_host);
  ASSIGN_OR_RETURN(o.tls, TlsOptionsFromFlags());
  if (o.servers.empty() || o.rank < 0 || o.out_dir.empty()) {
    return absl::InvalidArgumentError(
        "comm-worker is started by lockstep_bench comm; it needs --servers, "
        "--rank and --out_dir");
  }
  return o;
}

absl::Status RunCountersFromFlags() {
  return RunCountersMode(
      absl::StrSplit(absl::GetFlag(FLAGS_servers), ',', absl::SkipEmpty()),
      absl::GetFlag(FLAGS_out_dir));
}

namespace {

// Writes a mode's JSON where --json says, if it says.
absl::Status Report(const std::string& json) {
  const std::string path = absl::GetFlag(FLAGS_json);
  if (path.empty()) return absl::OkStatus();
  RETURN_IF_ERROR(WriteFileAtomically(path, json));
  std::printf("JSON written to %s\n", path.c_str());
  return absl::OkStatus();
}

// comm: workers push a fixed gradient through real servers.
absl::Status RunComm(const ModeContext& ctx) {
  ASSIGN_OR_RETURN(CommOptions options, ParseCommOptions());
  options.bin_dir = ctx.bin_dir;
  options.self_exe = ctx.self;
  options.interrupt_fd = ctx.interrupt_fd;
  ASSIGN_OR_RETURN(CommResult result, RunCommBench(options));
  PrintCommTable(result, stdout);
  return Report(CommResultJson(result));
}

// e2e: the tutorial MLP trained with lockstep_launch.
absl::Status RunE2e(const ModeContext& ctx) {
  E2eOptions options;
  options.runs = absl::GetFlag(FLAGS_runs);
  options.workers = absl::GetFlag(FLAGS_workers);
  options.ps = absl::GetFlag(FLAGS_ps);
  options.extra_args = ctx.extra;
  options.bin_dir = ctx.bin_dir;
  options.interrupt_fd = ctx.interrupt_fd;
  options.timeout = absl::Seconds(absl::GetFlag(FLAGS_timeout_s));
  RETURN_IF_ERROR(CheckAtLeast("runs", options.runs, 1));
  ASSIGN_OR_RETURN(E2eResult result, RunE2eBench(options));
  PrintE2eTable(result, stdout);
  return Report(E2eResultJson(result));
}

// peers: the PyTorch peer programs beside the matching Lockstep runs.
absl::Status RunPeers(const ModeContext& ctx) {
  PeersOptions options;
  options.peers_dir = absl::GetFlag(FLAGS_peers_dir);
  options.rounds = absl::GetFlag(FLAGS_rounds);
  options.large_iters = absl::GetFlag(FLAGS_large_iters);
  options.small_iters = absl::GetFlag(FLAGS_small_iters);
  options.self_exe = ctx.self;
  options.bin_dir = ctx.bin_dir;
  options.interrupt_fd = ctx.interrupt_fd;
  options.timeout = absl::Seconds(absl::GetFlag(FLAGS_timeout_s));
  RETURN_IF_ERROR(CheckAtLeast("rounds", options.rounds, 1));
  ASSIGN_OR_RETURN(PeersResult result, RunPeersBench(options));
  PrintPeersTable(result, stdout);
  return Report(PeersResultJson(result));
}

// conv: every convolution of a model on the CPU device.
absl::Status RunConv() {
  ConvBenchOptions options;
  options.model = absl::GetFlag(FLAGS_model);
  options.batch = absl::GetFlag(FLAGS_batch);
  options.reps = absl::GetFlag(FLAGS_rounds);
  options.threads = absl::GetFlag(FLAGS_threads);
  RETURN_IF_ERROR(CheckAtLeast("batch", options.batch, 1));
  RETURN_IF_ERROR(CheckAtLeast("rounds", options.reps, 1));
  ASSIGN_OR_RETURN(ConvBenchResult result, RunConvBench(options));
  PrintConvTable(result, stdout);
  return Report(ConvResultJson(result));
}

// server: a shard's own work at memory speed.
absl::Status RunServer() {
  ServerBenchOptions options;
  options.elements = absl::GetFlag(FLAGS_params);
  options.reps = absl::GetFlag(FLAGS_reps);
  RETURN_IF_ERROR(CheckAtLeast("reps", options.reps, 1));
  for (absl::string_view t : absl::StrSplit(absl::GetFlag(FLAGS_thread_counts),
                                            ',', absl::SkipEmpty())) {
    int threads = 0;
    if (!absl::SimpleAtoi(t, &threads) || threads < 1 || threads > 1024) {
      return absl::InvalidArgumentError(absl::StrCat(
          "--thread_counts takes counts in [1, 1024], got \"", t, "\""));
    }
    options.threads.push_back(threads);
  }
  options.variants =
      absl::StrSplit(absl::GetFlag(FLAGS_variants), ',', absl::SkipEmpty());
  ASSIGN_OR_RETURN(ServerBenchResult result, RunServerBench(options));
  PrintServerTable(result, stdout);
  return Report(ServerResultJson(result));
}

// study: parameter servers against all-reduce, written as files.
absl::Status RunStudyMode(const ModeContext& ctx) {
  StudyOptions options;
  options.quick = absl::GetFlag(FLAGS_quick);
  options.links =
      absl::StrSplit(absl::GetFlag(FLAGS_links), ',', absl::SkipEmpty());
  for (const std::string& link : options.links) {
    if (link != "loopback" && link != "sim") {
      return absl::InvalidArgumentError(absl::StrCat(
          "--links takes loopback and/or sim, got \"", link, "\""));
    }
  }
  options.out_dir = absl::GetFlag(FLAGS_out_dir);
  if (options.out_dir.empty()) options.out_dir = "study";
  options.sim_rate_mbit = absl::GetFlag(FLAGS_sim_rate_mbit);
  options.sim_delay_ms = absl::GetFlag(FLAGS_sim_delay_ms);
  if (options.sim_rate_mbit <= 0 || options.sim_delay_ms < 0) {
    return absl::InvalidArgumentError(
        "--sim_rate_mbit must be positive and --sim_delay_ms not negative");
  }
  options.sim_name = absl::GetFlag(FLAGS_sim_name);
  options.sim_cc = absl::GetFlag(FLAGS_sim_cc);
  options.cluster_script = absl::GetFlag(FLAGS_cluster_script);
  options.plots = absl::GetFlag(FLAGS_plots);
  options.kinds =
      absl::StrSplit(absl::GetFlag(FLAGS_kinds), ',', absl::SkipEmpty());
  for (const std::string& kind : options.kinds) {
    if (kind != "comm" && kind != "mlp" && kind != "straggler" &&
        kind != "rounds") {
      return absl::InvalidArgumentError(
          absl::StrCat("--kinds takes comm, mlp, straggler and/or rounds, got "
                       "\"",
                       kind, "\""));
    }
  }
  ASSIGN_OR_RETURN(options.chunk_bytes, ChunkBytesFlag());
  options.python = absl::GetFlag(FLAGS_python);
  options.plot_script = absl::GetFlag(FLAGS_plot_script);
  options.data_dir = absl::GetFlag(FLAGS_study_data_dir);
  options.command = ctx.command;
  options.bin_dir = ctx.bin_dir;
  options.self_exe = ctx.self;
  options.interrupt_fd = ctx.interrupt_fd;
  options.run_timeout = absl::Seconds(absl::GetFlag(FLAGS_timeout_s));
  options.total_timeout = absl::Seconds(absl::GetFlag(FLAGS_study_timeout_s));
  return RunStudy(options);
}

}  // namespace

absl::Status RunMode(const std::string& mode,
                     const std::vector<std::string>& extra, int interrupt_fd,
                     const std::string& command) {
  if (mode != "e2e" && !extra.empty()) {
    return absl::InvalidArgumentError(absl::StrCat(
        "unexpected argument(s) for ", mode, ": ", absl::StrJoin(extra, " ")));
  }
  ModeContext ctx{extra, interrupt_fd, command, "", ""};
  ASSIGN_OR_RETURN(ctx.self, SelfExe());
  ASSIGN_OR_RETURN(ctx.bin_dir, ExecutableDir());
  if (mode == "comm") return RunComm(ctx);
  if (mode == "e2e") return RunE2e(ctx);
  if (mode == "peers") return RunPeers(ctx);
  if (mode == "conv") return RunConv();
  if (mode == "server") return RunServer();
  if (mode == "study") return RunStudyMode(ctx);
  return absl::InvalidArgumentError(
      absl::StrCat("unknown mode \"", mode,
                   "\"; expected comm, e2e, peers, conv, server or study"));
}

}  // namespace lockstep
