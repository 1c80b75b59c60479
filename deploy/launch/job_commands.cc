// What lockstep_launch starts each process with: the servers' and the
// workers' command lines and environments (TLS flags, per-process metrics
// ports and traces, TF_CONFIG, LOCKSTEP_* and torchrun's RANK, WORLD_SIZE,
// LOCAL_RANK and LOCAL_WORLD_SIZE for each rank), how it tells
// the user to reach them, and how many GPUs the workers may share.
// The job's logic is launcher.cc.
#include <errno.h>
#include <limits.h>
#include <stdlib.h>
#include <unistd.h>

#include <algorithm>
#include <cstdio>
#include <cstdlib>
#include <cstring>
#include <optional>
#include <string>
#include <utility>
#include <vector>

#include "absl/strings/match.h"
#include "absl/strings/numbers.h"
#include "absl/strings/str_cat.h"
#include "absl/strings/str_join.h"
#include "absl/strings/str_split.h"
#include "absl/strings/strip.h"
#include "common/formats/json_writer.h"
#include "common/optim/sum_order.h"
#include "deploy/launch/launcher.h"

namespace lockstep {
namespace {

// The admin certificate's CN (deploy/tls/make_certs.sh).
constexpr char kAdminIdentity[] = "lockstep-admin";

// --tls_cert/--tls_key/--tls_ca for `role` ("server" or "worker").
void AddTlsFlags(const LaunchOptions& options, const char* role,
                 std::vector<std::string>* argv) {
  if (!options.tls_dir.empty()) {
    argv->push_back(
        absl::StrCat("--tls_cert=", options.tls_dir, "/", role, ".pem"));
    argv->push_back(
        absl::StrCat("--tls_key=", options.tls_dir, "/", role, ".key"));
    argv->push_back(absl::StrCat("--tls_ca=", options.tls_dir, "/ca.pem"));
  }
  if (!options.token_file.empty()) {
    argv->push_back(absl::StrCat("--token_file=", options.token_file));
  }
}

// Process `index` (servers first, then workers) of the job, called `name`:
// its --metrics_port, --health_port and --trace.
void AddPerProcessFlags(const LaunchOptions& options, int index,
                        const std::string& name,
                        std::vector<std::string>* argv) {
  if (options.metrics_port_base > 0) {
    argv->push_back(
        absl::StrCat("--metrics_port=", options.metrics_port_base + index));
  }
  if (options.health_port_base > 0) {
    argv->push_back(
        absl::StrCat("--health_port=", options.health_port_base + index));
  }
  if (!options.trace_dir.empty()) {
    argv->push_back(
        absl::StrCat("--trace=", options.trace_dir, "/", name, ".json"));
  }
}

// A port base out of range for `count` processes: negative, or leaving
// too few ports below 65536.
std::optional<InvalidLaunchOption> CheckPortBase(const char* option, int base,
                                                 int count) {
  if (base >= 0 && (base == 0 || base + count - 1 <= 65535)) {
    return std::nullopt;
  }
  return InvalidLaunchOption{
      option, absl::StrCat("must be 0 (off) or leave room for ", count,
                           " ports up to 65535, got ", base)};
}

// "ps0 PREFIX127.0.0.1:PORTSUFFIX, ..., workerR ...", from port `base` on.
std::string PortList(const LaunchOptions& options, int base,
                     absl::string_view prefix, absl::string_view suffix) {
  std::vector<std::string> entries;
  for (int i = 0; i < options.ps + options.workers; ++i) {
    entries.push_back(
        absl::StrCat(i < options.ps ? absl::StrCat("ps", i)
                                    : absl::StrCat("worker", i - options.ps),
                     " ", prefix, "127.0.0.1:", base + i, suffix));
  }
  return absl::StrJoin(entries, ", ");
}

}  // namespace

std::optional<InvalidLaunchOption> ValidatePerProcessOptions(
    const LaunchOptions& options) {
  const int count = options.ps + options.workers;
  if (auto invalid = CheckPortBase("metrics_port_base",
                                   options.metrics_port_base, count)) {
    return invalid;
  }
  if (auto invalid =
          CheckPortBase("health_port_base", options.health_port_base, count)) {
    return invalid;
  }
  if (options.metrics_port_base > 0 && options.health_port_base > 0 &&
      std::abs(options.metrics_port_base - options.health_port_base) < count) {
    return InvalidLaunchOption{
        "health_port_base",
        absl::StrCat("its ", count, " ports overlap --metrics_port_base's")};
  }
  if (!options.trace_dir.empty() &&
      access(options.trace_dir.c_str(), W_OK | X_OK) != 0) {
    return InvalidLaunchOption{
        "trace_dir", absl::StrCat("cannot write in ", options.trace_dir, ": ",
                                  std::strerror(errno))};
  }
  return std::nullopt;
}

void LogHowToReachTheJob(const LaunchOptions& options,
                         const std::vector<std::string>& addresses,
                         ProcessGroup& group) {
  std::string ctl =
      absl::StrCat("status: ", options.bin_dir, "/lockstep_ctl status ",
                   absl::StrJoin(addresses, ","), " --watch");
  if (!options.tls_dir.empty()) {
    // GetStatus takes the admin role: the admin certificate.
    absl::StrAppend(&ctl, " --tls_ca=", options.tls_dir,
                    "/ca.pem --tls_cert=", options.tls_dir,
                    "/admin.pem --tls_key=", options.tls_dir, "/admin.key");
  }
  if (!options.token_file.empty()) {
    absl::StrAppend(&ctl, " --token_file=", options.token_file);
  }
  group.Log(ctl);
  if (options.metrics_port_base > 0) {
    group.Log(absl::StrCat(
        "metrics: ",
        PortList(options, options.metrics_port_base, "http://", "/metrics")));
  }
  if (options.health_port_base > 0) {
    group.Log(absl::StrCat(
        "health: ", PortList(options, options.health_port_base, "", "")));
  }
  if (!options.trace_dir.empty()) {
    group.Log(absl::StrCat("traces: ", options.trace_dir,
                           "/{ps,worker}N.json; merge them with ",
                           options.bin_dir, "/lockstep_ctl merge-traces"));
  }
}

std::vector<std::string> ServerArgv(const LaunchOptions& options, int shard,
                                    const std::string& port_file) {
  std::vector<std::string> argv = {
      absl::StrCat(options.bin_dir, "/lockstep_server")};
  for (std::string& flag : ServerListenFlags(options.hosts, shard, port_file,
                                             !options.tls_dir.empty())) {
    argv.push_back(std::move(flag));
  }
  argv.push_back(absl::StrCat("--workers=", options.workers));
  argv.push_back("--exit_when_done");
  if (options.ps > 1) {
    argv.push_back(absl::StrCat("--shard=", shard));
    argv.push_back(absl::StrCat("--num_shards=", options.ps));
  }
  if (options.sum_order != SumOrderName(SumOrder::kArrival)) {
    argv.push_back(absl::StrCat("--sum_order=", options.sum_order));
  }
  AddTlsFlags(options, "server", &argv);
  if (!options.tls_dir.empty()) {
    argv.push_back(absl::StrCat("--admin_identities=", kAdminIdentity));
  }
  AddPerProcessFlags(options, shard, absl::StrCat("ps", shard), &argv);
  argv.insert(argv.end(), options.server_args.begin(),
              options.server_args.end());
  return argv;
}

std::vector<std::string> WorkerArgv(const LaunchOptions& options, int rank,
                                    const std::string& servers) {
  if (!options.command.empty()) return options.command;
  const char* progress =
      rank != 0 ? "none" : (options.progress_bar ? "bar" : "lines");
  std::vector<std::string> argv = {
      absl::StrCat(options.bin_dir, "/lockstep_worker"),
      absl::StrCat("--servers=", servers),
      absl::StrCat("--workers=", options.workers),
      absl::StrCat("--rank=", rank),
      absl::StrCat("--progress=", progress),
  };
  for (std::string& flag :
       RemoteWorkerFlags(options.hosts, rank, !options.tls_dir.empty())) {
    argv.push_back(std::move(flag));
  }
  if (options.gpus > 0) {
    argv.push_back(absl::StrCat("--gpu=", rank % options.gpus));
  }
  if (rank == 0 && !options.summary_json.empty()) {
    argv.push_back(absl::StrCat("--summary_json=", options.summary_json));
  }
  AddTlsFlags(options, "worker", &argv);
  AddPerProcessFlags(options, options.ps + rank, absl::StrCat("worker", rank),
                     &argv);
  argv.insert(argv.end(), options.worker_args.begin(),
              options.worker_args.end());
  return argv;
}

std::vector<std::string> WorkerEnv(const LaunchOptions& options, int rank,
                                   const std::vector<std::string>& servers,
                                   const std::string& python_dir,
                                   const char* inherited_pythonpath) {
  const char* progress =
      rank != 0 ? "none" : (options.progress_bar ? "bar" : "lines");
  std::vector<std::string> quoted_servers, quoted_workers;
  for (const std::string& s : servers) quoted_servers.push_back(JsonQuote(s));
  // Workers listen on nothing in PS mode: TF_CONFIG names each task only
  // so that TensorFlow-style code finds the worker count and its index.
  for (int r = 0; r < options.workers; ++r) {
    quoted_workers.push_back(JsonQuote(absl::StrCat("worker", r, ":0")));
  }
  const LocalRank local = LocalRankOf(options.hosts, options.workers, rank);
  std::vector<std::string> env = {
      absl::StrCat("LOCKSTEP_RANK=", rank),
      absl::StrCat("LOCKSTEP_WORKERS=", options.workers),
      absl::StrCat("LOCKSTEP_SERVERS=", absl::StrJoin(servers, ",")),
      // torchrun's names for the same job, for scripts written for it.
      absl::StrCat("RANK=", rank),
      absl::StrCat("WORLD_SIZE=", options.workers),
      absl::StrCat("LOCAL_RANK=", local.rank),
      absl::StrCat("LOCAL_WORLD_SIZE=", local.workers),
      absl::StrCat("TF_CONFIG={\"cluster\": {\"ps\": [",
                   absl::StrJoin(quoted_servers, ", "), "], \"worker\": [",
                   absl::StrJoin(quoted_workers, ", "),
                   "]}, \"task\": {\"type\": \"worker\", \"index\": ", rank,
                   "}}"),
      absl::StrCat("LOCKSTEP_PROGRESS=", progress),
      "PYTHONUNBUFFERED=1",
  };
  if (options.gpus > 0) {
    env.push_back(absl::StrCat("LOCKSTEP_GPU=", rank % options.gpus));
  }
  if (rank == 0 && !options.summary_json.empty()) {
    env.push_back(absl::StrCat("LOCKSTEP_SUMMARY_JSON=", options.summary_json));
  }
  if (!options.tls_dir.empty()) {
    env.push_back(absl::StrCat("LOCKSTEP_TLS_CA=", options.tls_dir, "/ca.pem"));
    env.push_back(
        absl::StrCat("LOCKSTEP_TLS_CERT=", options.tls_dir, "/worker.pem"));
    env.push_back(
        absl::StrCat("LOCKSTEP_TLS_KEY=", options.tls_dir, "/worker.key"));
  }
  if (!options.token_file.empty()) {
    env.push_back(absl::StrCat("LOCKSTEP_TOKEN_FILE=", options.token_file));
  }
  if (!python_dir.empty()) {
    env.push_back(absl::StrCat(
        "PYTHONPATH=", python_dir,
        inherited_pythonpath != nullptr && *inherited_pythonpath != '\0'
            ? absl::StrCat(":", inherited_pythonpath)
            : std::string()));
  }
  return env;
}

std::string PythonDir(const LaunchOptions& options) {
  if (options.command.empty()) return "";
  const std::string dir = absl::StrCat(options.bin_dir, "/../python");
  if (access(absl::StrCat(dir, "/lockstep/__init__.py").c_str(), R_OK) != 0) {
    return "";
  }
  char resolved[PATH_MAX];
  return realpath(dir.c_str(), resolved) != nullptr ? resolved : dir;
}

std::string PathWithBinDir(const std::string& bin_dir,
                           const char* inherited_path) {
  char resolved[PATH_MAX];
  const std::string dir =
      realpath(bin_dir.c_str(), resolved) != nullptr ? resolved : bin_dir;
  return absl::StrCat("PATH=", dir,
                      inherited_path != nullptr && *inherited_path != '\0'
                          ? absl::StrCat(":", inherited_path)
                          : std::string());
}

int CountVisibleGpus() {
  FILE* pipe = popen("nvidia-smi -L 2>/dev/null", "r");
  if (pipe == nullptr) return 0;
  int gpus = 0;
  char line[512];
  while (std::fgets(line, sizeof(line), pipe) != nullptr) {
    if (std::strncmp(line, "GPU ", 4) == 0) ++gpus;
  }
  if (pclose(pipe) != 0) return 0;
  return VisibleGpus(gpus, std::getenv("CUDA_VISIBLE_DEVICES"));
}

int VisibleGpus(int installed, const char* visible) {
  if (visible == nullptr) return installed;
  enum class Kind { kOrdinal, kGpuUuid, kMigUuid };
  auto kind_of = [](absl::string_view entry) {
    if (absl::StartsWith(entry, "GPU-")) return Kind::kGpuUuid;
    if (absl::StartsWith(entry, "MIG-")) return Kind::kMigUuid;
    return Kind::kOrdinal;
  };
  int listed = 0;
  Kind first = Kind::kOrdinal;
  std::vector<int> ordinals;
  for (absl::string_view entry : absl::StrSplit(visible, ',')) {
    entry = absl::StripAsciiWhitespace(entry);
    if (entry.empty()) break;
    const Kind kind = kind_of(entry);
    if (listed == 0) first = kind;
    if (kind != first) break;  // A list is of one kind.
    if (kind == Kind::kOrdinal) {
      int ordinal = -1;
      if (!absl::SimpleAtoi(entry, &ordinal) || ordinal < 0 ||
          ordinal >= installed ||
          std::find(ordinals.begin(), ordinals.end(), ordinal) !=
              ordinals.end()) {
        break;  // Invalid: CUDA shows the devices before it.
      }
      ordinals.push_back(ordinal);
    }
    ++listed;
  }
  // A process sees one MIG device at most.
  if (first == Kind::kMigUuid) listed = std::min(listed, 1);
  return std::min(listed, installed);
}

}  // namespace lockstep
