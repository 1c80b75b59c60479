// `lockstep_bench peers`: the PyTorch programs of tests/bench/peers side by
// side with the matching Lockstep runs, alternated in one invocation.
#ifndef LOCKSTEP_TESTS_BENCH_PEERS_BENCH_H_
#define LOCKSTEP_TESTS_BENCH_PEERS_BENCH_H_

#include <cstdio>
#include <map>
#include <string>
#include <vector>

#include "absl/status/statusor.h"
#include "absl/time/time.h"

namespace lockstep {

struct PeersOptions {
  std::string peers_dir;  // Holds torch_peers.py.
  std::string python = "/usr/bin/python3";
  int rounds = 3;
  int large_iters = 15;    // Steps per run with 25.6 M parameters.
  int small_iters = 1000;  // Steps per run with 101,770.
  int mlp_epochs = 3;      // Both trainers; DDP times epochs 2..E.
  std::string self_exe;    // This binary, re-run for the comm figures.
  std::string bin_dir;
  int interrupt_fd = -1;
  absl::Duration timeout = absl::Seconds(300);  // Per program run.
};

// Every figure by name ("a.torch_rpc_ps_step_seconds", ...), one value per
// round, and the medians.
struct PeersResult {
  PeersOptions options;
  std::map<std::string, std::vector<double>> values;
  double load_average_before = 0;  // 1-minute load average.
  double load_average_after = 0;
  double MedianOf(const std::string& name) const;
};

absl::StatusOr<PeersResult> RunPeersBench(const PeersOptions& options);

std::string PeersResultJson(const PeersResult& result);
void PrintPeersTable(const PeersResult& result, std::FILE* out);

}  // namespace lockstep

#endif  // LOCKSTEP_TESTS_BENCH_PEERS_BENCH_H_
