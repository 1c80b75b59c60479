// `lockstep_bench comm`: communication-only steps through real servers.
#ifndef LOCKSTEP_TESTS_BENCH_COMM_BENCH_H_
#define LOCKSTEP_TESTS_BENCH_COMM_BENCH_H_

#include <cstdint>
#include <cstdio>
#include <optional>
#include <string>
#include <vector>

#include "absl/status/statusor.h"
#include "absl/time/time.h"
#include "common/model/model_signature.h"
#include "common/wire/wire_codec.h"
#include "tests/bench/bench_hosts.h"
#include "tests/bench/loopback.h"
#include "worker/exchange/ps/ps_client.h"

namespace lockstep {

struct CommOptions {
  int64_t params = 25'600'000;
  int workers = 2;
  int ps = 1;
  WireDType wire_dtype = WireDType::kFloat32;
  int64_t chunk_bytes = kAutoChunkBytes;  // common/model/chunk_plan.h
  int iters = 20;
  int warmup = 3;
  // PsClientOptions::max_pushes_in_flight (kAutoPushWindow: the default).
  int push_window = kAutoPushWindow;
  // Empty: the workers push through `ps` servers. "gloo" or "grpc-ring":
  // they all-reduce among themselves; `ps` must be 1, a server that only
  // hosts the rendezvous.
  std::string allreduce;
  std::string sum_order = "arrival";  // The servers' --sum_order.
  // Shard i on worker i's host (BytePS's colocated servers) rather than on
  // hosts of their own; needs ps <= workers.
  bool colocate = false;
  // Where the processes run: servers on hosts[0, ps), worker r on
  // hosts[ps + r] (hosts[r] when colocated). Empty: everything on loopback.
  std::vector<BenchHost> hosts;
  bool iperf3 = false;   // Also measure the loopback floor.
  std::string bin_dir;   // Holds lockstep_server.
  std::string self_exe;  // This binary, re-run as the workers.
  int interrupt_fd = -1;
  absl::Duration timeout = absl::Seconds(600);  // For the whole run.
};

// Per-step figures of one run. Step time is, for each timed step, the
// slowest worker's PushPull; phases are averages per step.
struct CommResult {
  CommOptions options;
  std::vector<double> step_seconds;
  double median_step_seconds = 0;
  double p90_step_seconds = 0;
  double mean_step_seconds = 0;
  double min_step_seconds = 0;
  int64_t model_bytes = 0;    // params * 4 (fp32 master weights).
  double bytes_per_step = 0;  // Payload bytes into + out of all servers.
  double algbw_gbps = 0;      // params * 4 bytes / median step, GB/s.
  // Client phases, per step, averaged over workers (see StepTimings).
  double client_encode_seconds = 0;
  double client_send_seconds = 0;
  double client_wait_seconds = 0;
  double client_decode_seconds = 0;
  // Server phases (ServerCounters): summing pushes and applying the
  // optimizer per step, summed over chunks and shards (they may overlap);
  // the barrier wait (first push to last) per chunk barrier.
  double server_accumulate_seconds = 0;
  double server_apply_seconds = 0;
  double server_barrier_wait_seconds = 0;
  double chunk_barriers_per_step = 0;
  std::vector<int64_t> server_peak_rss_bytes;  // VmHWM, by shard.
  std::optional<LoopbackResult> loopback;
  double loopback_floor_seconds = 0;  // bytes_per_step / bidir bandwidth.
  double load_average = 0;            // Of the machine as the run started.
  // How busy the machine's CPUs were over the timed steps, 0..1 (every
  // process of a simulated cluster shares them).
  double cpu_busy = 0;
};

absl::StatusOr<CommResult> RunCommBench(const CommOptions& options);

// Flat JSON with every figure above and the configuration.
std::string CommResultJson(const CommResult& result);
void PrintCommTable(const CommResult& result, std::FILE* out);

}  // namespace lockstep

#endif  // LOCKSTEP_TESTS_BENCH_COMM_BENCH_H_
