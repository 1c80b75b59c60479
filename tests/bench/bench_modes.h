// lockstep_bench's modes as main.cc runs them: the flags (bench_modes.cc
// defines them) read into each mode's options, the mode run, its figures
// printed and written as JSON where --json says.
#ifndef LOCKSTEP_TESTS_BENCH_BENCH_MODES_H_
#define LOCKSTEP_TESTS_BENCH_BENCH_MODES_H_

#include <string>
#include <vector>

#include "absl/status/status.h"
#include "absl/status/statusor.h"
#include "tests/bench/comm_worker.h"

namespace lockstep {

// Runs `mode` (comm, e2e, peers, conv, server or study). `extra` holds
// e2e's worker flags (refused for the others); `interrupt_fd` reads the
// signals that stop a run; `command` is the bench's own command line.
// INVALID_ARGUMENT for bad flags or an unknown mode.
absl::Status RunMode(const std::string& mode,
                     const std::vector<std::string>& extra, int interrupt_fd,
                     const std::string& command);

// The hidden comm-worker mode's options, from its flags.
absl::StatusOr<CommWorkerOptions> ParseCommWorkerOptions();

// The hidden counters mode: reads the servers of --servers into --out_dir.
absl::Status RunCountersFromFlags();

}  // namespace lockstep

#endif  // LOCKSTEP_TESTS_BENCH_BENCH_MODES_H_
