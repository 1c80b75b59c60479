// `lockstep_bench study`: parameter servers against all-reduce, as a matrix
// of runs (sync mode x workers x shards x model size x link), written as
// CSV and JSON and drawn as plots (tests/bench/study_plots.py).
//
//   comm       the comm-worker's synthetic gradients of M bytes through k
//              PS shards, gloo or grpc-ring, timed per step, with the cost
//              model of study_report.h beside each simulated-link run;
//   mlp        the tutorial MLP with every sync mode, rank 0 logging loss
//              per step (loss against step and against wall-clock time);
//   straggler  the MLP with a slow rank, with and without backup workers.
//
// Links: "loopback" (every process on 127.0.0.1) and "sim", the simulated
// cluster of deploy/sim/cluster.sh (root only), each process on its own
// host. Every run is bounded by run_timeout and the study by
// total_timeout; the runs left when it is spent are recorded as skipped.
#ifndef LOCKSTEP_TESTS_BENCH_STUDY_H_
#define LOCKSTEP_TESTS_BENCH_STUDY_H_

#include <cstdint>
#include <string>
#include <vector>

#include "absl/status/status.h"
#include "absl/time/time.h"

namespace lockstep {

struct StudyOptions {
  bool quick = false;  // A small matrix for the smoke test (seconds).
  // "loopback" and/or "sim"; empty: loopback, and sim too when root.
  std::vector<std::string> links;
  std::string out_dir =
      "study";                  // study.csv, study_steps.csv, study.json, PNGs.
  double sim_rate_mbit = 1000;  // Each simulated host's link, each way.
  double sim_delay_ms = 0.2;    // Added one-way, where netem exists.
  std::string sim_name = "lss";  // cluster.sh --name.
  std::string sim_cc = "reno";   // cluster.sh --cc: TCP congestion control.
  std::string cluster_script;    // deploy/sim/cluster.sh.
  bool plots = true;
  // The PS comm runs' chunk size; kAutoChunkBytes: the workers' default.
  int64_t chunk_bytes = 0;
  // Which kinds of run ("comm", "mlp", "straggler"); empty: all of them.
  std::vector<std::string> kinds;
  std::string python = "/usr/bin/python3";  // With matplotlib.
  std::string plot_script;                  // tests/bench/study_plots.py.
  std::string data_dir;  // Fashion-MNIST; synthetic data when it is missing.
  std::string command;   // As typed, for the record.
  std::string bin_dir;   // lockstep_server, lockstep_worker.
  std::string self_exe;  // This binary (comm workers, counter readers).
  int interrupt_fd = -1;
  absl::Duration run_timeout = absl::Seconds(180);
  absl::Duration total_timeout = absl::Minutes(25);
};

// Runs the matrix, writes its files to out_dir, prints the table and the
// cost-model check. Fails when a run failed (after writing everything).
absl::Status RunStudy(const StudyOptions& options);

}  // namespace lockstep

#endif  // LOCKSTEP_TESTS_BENCH_STUDY_H_
