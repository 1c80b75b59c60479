// Reads the parameter servers' counters (GetStatus) for the benchmark's
// server phases. A simulated host's address is not reachable from the
// machine's own network namespace, so the reading can run on one of the
// cluster's hosts: the benchmark re-runs itself there in the hidden
// `counters` mode, which writes each server's ServerCounters to a file.
#ifndef LOCKSTEP_TESTS_BENCH_SERVER_COUNTERS_H_
#define LOCKSTEP_TESTS_BENCH_SERVER_COUNTERS_H_

#include <string>
#include <vector>

#include "absl/status/status.h"
#include "absl/status/statusor.h"
#include "absl/time/time.h"
#include "lockstep/v1/lockstep.pb.h"
#include "tests/bench/bench_hosts.h"
#include "tests/bench/child_runner.h"

namespace lockstep {

// The counters of every server in `addresses`, in order, read from `from`:
// directly when it has no prefix (this process reaches it), else through
// `self_exe counters` started on it by `runner`, with files in `dir`.
absl::StatusOr<std::vector<v1::ServerCounters>> ReadServerCounters(
    ChildRunner* runner, const BenchHost& from, const std::string& self_exe,
    const std::vector<std::string>& addresses, const std::string& dir,
    absl::Duration timeout);

// The hidden `counters` mode: writes server i's counters, serialized, to
// `out_dir`/counters.i.
absl::Status RunCountersMode(const std::vector<std::string>& servers,
                             const std::string& out_dir);

}  // namespace lockstep

#endif  // LOCKSTEP_TESTS_BENCH_SERVER_COUNTERS_H_
