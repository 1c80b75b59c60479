// One training job of `lockstep_bench study`: real lockstep_server and
// lockstep_worker processes placed on BenchHosts (loopback or the simulated
// cluster), with rank 0's per-step log (--step_log) and summary read back.
#ifndef LOCKSTEP_TESTS_BENCH_STUDY_MLP_H_
#define LOCKSTEP_TESTS_BENCH_STUDY_MLP_H_

#include <cstdint>
#include <string>
#include <vector>

#include "absl/status/statusor.h"
#include "absl/time/time.h"
#include "tests/bench/bench_hosts.h"

namespace lockstep {

struct MlpJob {
  // ps | allreduce | async | ssp | localsgd | diloco (--sync).
  std::string sync = "ps";
  std::string allreduce;    // The backend when sync is allreduce.
  int workers = 2;
  int shards = 1;  // Servers; all-reduce needs just the rendezvous.
  int backup_workers = 0;
  int staleness = 0;
  std::string straggle;  // --straggle, e.g. "3:40"; empty: none.
  int straggle_random_ms = 0;
  int local_steps = 0;  // localsgd, diloco: --local_steps.
  int epochs = 1;
  int64_t max_steps = 0;  // > 0: stop after this many steps.
  // Rank 0 evaluates on the test set after every epoch
  // (MlpJobResult::epoch_accuracy).
  bool eval_every_epoch = false;
  // Data flags for every worker (--data_dir=... or --dataset=synthetic ...).
  std::vector<std::string> data_flags;
};

struct MlpJobResult {
  std::vector<int64_t> steps;  // Rank 0's --step_log, line by line.
  std::vector<double> seconds;
  std::vector<double> losses;
  double test_accuracy = -1;
  double wall_seconds = 0;
  // With eval_every_epoch: the test accuracy after each epoch, the last
  // one's the summary's, and the step log's seconds at each epoch's end.
  std::vector<double> epoch_accuracy;
  std::vector<double> epoch_seconds;
  // Bytes each worker's host sent on its link during the job (headers and
  // every message included), averaged over the workers; -1 on loopback,
  // where all hosts share one interface.
  double tx_bytes_per_worker = -1;
};

// Runs `job` with server shard i on hosts[i] and worker r on
// hosts[shards + r], scratch files and the log in `dir`. Fails when a
// process fails or `timeout` passes; every process is stopped either way.
absl::StatusOr<MlpJobResult> RunMlpJob(const MlpJob& job,
                                       const std::vector<BenchHost>& hosts,
                                       const std::string& bin_dir,
                                       const std::string& dir, int interrupt_fd,
                                       absl::Duration timeout);

}  // namespace lockstep

#endif  // LOCKSTEP_TESTS_BENCH_STUDY_MLP_H_
