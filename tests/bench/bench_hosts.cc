#include "tests/bench/bench_hosts.h"

#include <utility>

#include "absl/strings/match.h"
#include "absl/strings/str_cat.h"
#include "absl/strings/str_split.h"
#include "absl/strings/strip.h"
#include "common/base/status_macros.h"
#include "deploy/launch/launcher.h"

namespace lockstep {

std::vector<BenchHost> LoopbackHosts(int count) {
  return std::vector<BenchHost>(count, BenchHost{"127.0.0.1", {}});
}

std::string SimStatusValue(const std::string& status, absl::string_view key) {
  for (absl::string_view line : absl::StrSplit(status, '\n')) {
    line = absl::StripAsciiWhitespace(line);
    if (absl::ConsumePrefix(&line, key) && absl::ConsumePrefix(&line, "=")) {
      return std::string(line);
    }
  }
  return "";
}

absl::StatusOr<std::vector<BenchHost>> SimHosts(const std::string& script,
                                                const std::string& name,
                                                const std::string& status) {
  std::vector<BenchHost> hosts;
  for (absl::string_view line : absl::StrSplit(status, '\n')) {
    line = absl::StripAsciiWhitespace(line);
    const std::string key = absl::StrCat("h", hosts.size(), "=");
    if (!absl::ConsumePrefix(&line, key)) continue;
    hosts.push_back({std::string(line),
                     {script, "run", absl::StrCat("--name=", name),
                      "--timeout=0", absl::StrCat("h", hosts.size())}});
  }
  if (hosts.empty()) {
    return absl::InvalidArgumentError(
        absl::StrCat("no hN=ADDRESS lines in the cluster's status:\n", status));
  }
  return hosts;
}

std::vector<std::string> OnHost(const BenchHost& host,
                                std::vector<std::string> argv) {
  std::vector<std::string> full = host.prefix;
  for (std::string& arg : argv) full.push_back(std::move(arg));
  return full;
}

void AllowPlaintextOn(const BenchHost& host, std::vector<std::string>* argv) {
  if (!absl::StartsWith(host.address, "127.")) argv->push_back("--insecure");
}

absl::StatusOr<ServerSet> StartServers(
    ChildRunner* runner, const std::string& bin_dir,
    absl::Span<const BenchHost> hosts, int workers, const std::string& dir,
    const std::vector<std::string>& extra_flags, absl::Duration timeout) {
  const int shards = static_cast<int>(hosts.size());
  ServerSet set;
  std::vector<std::string> port_files;
  for (int shard = 0; shard < shards; ++shard) {
    port_files.push_back(absl::StrCat(dir, "/port.", shard));
    std::vector<std::string> argv = {
        absl::StrCat(bin_dir, "/lockstep_server"),
        absl::StrCat("--listen=", hosts[shard].address, ":0"),
        absl::StrCat("--port_file=", port_files.back()),
        absl::StrCat("--workers=", workers),
        absl::StrCat("--shard=", shard),
        absl::StrCat("--num_shards=", shards)};
    AllowPlaintextOn(hosts[shard], &argv);
    for (const std::string& flag : extra_flags) argv.push_back(flag);
    ASSIGN_OR_RETURN(pid_t pid,
                     runner->Start(absl::StrCat("ps", shard),
                                   OnHost(hosts[shard], std::move(argv))));
    set.pids.push_back(pid);
  }
  set.addresses.resize(shards);
  RETURN_IF_ERROR(runner->WaitUntil(
      "starting the servers",
      [&]() {
        for (int shard = 0; shard < shards; ++shard) {
          absl::StatusOr<int> port = ReadPortFile(port_files[shard]);
          if (!port.ok()) return false;
          set.addresses[shard] = absl::StrCat(hosts[shard].address, ":", *port);
        }
        return true;
      },
      timeout));
  return set;
}

}  // namespace lockstep
