// The worker side of `lockstep_bench comm`: a process that pushes a fixed
// synthetic gradient through PsClient for a number of synchronous steps and
// times them. lockstep_bench runs it by re-executing itself in the hidden
// `comm-worker` mode.
#ifndef LOCKSTEP_TESTS_BENCH_COMM_WORKER_H_
#define LOCKSTEP_TESTS_BENCH_COMM_WORKER_H_

#include <signal.h>

#include <cstdint>
#include <string>
#include <vector>

#include "absl/status/status.h"
#include "absl/status/statusor.h"
#include "absl/time/time.h"
#include "common/security/tls_options.h"
#include "common/wire/wire_codec.h"
#include "worker/exchange/ps/ps_client.h"

namespace lockstep {

struct CommWorkerOptions {
  // host:port by shard; with `allreduce`, servers[0] is the coordinator.
  std::vector<std::string> servers;
  // Empty: push through the servers (PsClient::PushPull). Otherwise an
  // AllReducer backend ("gloo", "grpc-ring") summing among the workers, with
  // no server in the data path.
  std::string allreduce;
  std::string host = "127.0.0.1";  // allreduce: where peers reach this one.
  int rank = 0;
  int workers = 1;
  int64_t params = 0;  // One fp32 tensor of this many values.
  WireDType wire_dtype = WireDType::kFloat32;
  int64_t chunk_bytes = 0;
  int warmup = 0;
  int iters = 0;
  // PsClientOptions::max_pushes_in_flight (kAutoPushWindow: the default).
  int push_window = kAutoPushWindow;
  std::string out_dir;  // Where the ready and result files go.
  // The channels' security (plaintext by default; main.cc fills it from the
  // TLS flags, --insecure included, for hosts off loopback).
  TlsOptions tls;
  // How long to wait for the coordinator's go signal after the warmup.
  absl::Duration go_timeout = absl::Seconds(600);
};

// The protocol with the coordinator (comm_bench.cc): after `warmup` steps
// the worker writes ReadyFile() and waits for SIGUSR1, so that every
// worker has finished the warmup when the coordinator reads the servers'
// counters; after the timed steps it writes ResultFile() and leaves.
std::string ReadyFile(const std::string& out_dir, int rank);
std::string ResultFile(const std::string& out_dir, int rank);
inline constexpr int kGoSignal = SIGUSR1;

// What one worker measured over its timed steps.
struct CommWorkerResult {
  std::vector<double> step_seconds;
  StepTimings timings;  // Differences over the timed steps.
};

std::string FormatWorkerResult(const CommWorkerResult& result);
absl::StatusOr<CommWorkerResult> ParseWorkerResult(const std::string& text);

// Readies this process for the go signal. Call first in main: from then
// on a go signal is neither lost nor fatal, whichever thread it reaches.
void PrepareGoSignal();
// Returns once the go signal has come (before or during the call), or
// DEADLINE_EXCEEDED after `timeout`.
absl::Status WaitForGo(absl::Duration timeout);

absl::Status RunCommWorker(const CommWorkerOptions& options);

}  // namespace lockstep

#endif  // LOCKSTEP_TESTS_BENCH_COMM_WORKER_H_
