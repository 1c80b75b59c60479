// Where a benchmark's processes run: all on loopback, or each on its own
// host of the simulated cluster (deploy/sim/cluster.sh), entered through a
// command prefix. The same job code then serves both links.
#ifndef LOCKSTEP_TESTS_BENCH_BENCH_HOSTS_H_
#define LOCKSTEP_TESTS_BENCH_BENCH_HOSTS_H_

#include <sys/types.h>

#include <string>
#include <vector>

#include "absl/status/statusor.h"
#include "absl/strings/string_view.h"
#include "absl/time/time.h"
#include "absl/types/span.h"
#include "tests/bench/child_runner.h"

namespace lockstep {

// One place to run a process. Immutable once made.
struct BenchHost {
  std::string address;  // What the other processes dial: an IP literal.
  // Prepended to a command to run it there; empty: run it here. The prefix
  // must exec the command in place (same pid), so that signals and
  // /proc/PID reach the program itself.
  std::vector<std::string> prefix;
};

// `count` hosts that are all 127.0.0.1 with no prefix.
std::vector<BenchHost> LoopbackHosts(int count);

// The hosts of a running simulated cluster, parsed from the KEY=VALUE lines
// `cluster.sh up` or `status` prints (h0=10.214.0.1, ...): each is entered
// with `script run --name=NAME --timeout=0 hI`, bounded by our deadlines.
// The value of KEY in a simulated cluster's status (KEY=VALUE lines);
// empty when no line has it.
std::string SimStatusValue(const std::string& status, absl::string_view key);

absl::StatusOr<std::vector<BenchHost>> SimHosts(const std::string& script,
                                                const std::string& name,
                                                const std::string& status);

// `argv` to be run on `host`.
std::vector<std::string> OnHost(const BenchHost& host,
                                std::vector<std::string> argv);

// Appends --insecure to the flags of a Lockstep process on `host` when its
// address is not loopback: servers, all-reduce peers and clients refuse
// plaintext off loopback unless told, and the simulated cluster's
// namespaces are the bench's own. Nothing on loopback.
void AllowPlaintextOn(const BenchHost& host, std::vector<std::string>* argv);

// Parameter-server processes started by StartServers.
struct ServerSet {
  std::vector<pid_t> pids;
  std::vector<std::string> addresses;  // host:port, by shard.
};

// Starts one lockstep_server per host in `hosts` (shard i on hosts[i]),
// each listening on its host's address at a free port, for `workers`
// workers, plus `extra_flags`; returns once all have written their port
// files in `dir`, or an error after `timeout`.
absl::StatusOr<ServerSet> StartServers(
    ChildRunner* runner, const std::string& bin_dir,
    absl::Span<const BenchHost> hosts, int workers, const std::string& dir,
    const std::vector<std::string>& extra_flags, absl::Duration timeout);

}  // namespace lockstep

#endif  // LOCKSTEP_TESTS_BENCH_BENCH_HOSTS_H_
