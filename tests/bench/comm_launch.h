// The comm workers of `lockstep_bench comm`: their command lines, starting
// them on their hosts, and waiting until every one has written a file.
#ifndef LOCKSTEP_TESTS_BENCH_COMM_LAUNCH_H_
#define LOCKSTEP_TESTS_BENCH_COMM_LAUNCH_H_

#include <sys/types.h>

#include <string>
#include <vector>

#include "absl/status/status.h"
#include "absl/status/statusor.h"
#include "absl/time/time.h"
#include "tests/bench/bench_hosts.h"
#include "tests/bench/child_runner.h"
#include "tests/bench/comm_bench.h"

namespace lockstep {

// The command line of comm worker `rank` on `host`.
std::vector<std::string> WorkerArgv(const CommOptions& options,
                                    const std::vector<std::string>& addresses,
                                    const std::string& dir, int rank,
                                    const BenchHost& host);

// Starts comm worker `rank` on hosts[worker_base + rank] for every rank.
absl::StatusOr<std::vector<pid_t>> StartWorkers(
    ChildRunner* runner, const CommOptions& options,
    const std::vector<BenchHost>& hosts, int worker_base,
    const std::vector<std::string>& addresses, const std::string& dir);

// Waits, `what`, until every worker has written its file(dir, rank).
absl::Status WaitForEveryWorker(ChildRunner* runner, const char* what,
                                const CommOptions& options,
                                const std::string& dir,
                                std::string (*file)(const std::string&, int),
                                absl::Duration timeout);

}  // namespace lockstep

#endif  // LOCKSTEP_TESTS_BENCH_COMM_LAUNCH_H_
