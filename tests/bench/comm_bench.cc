#include "tests/bench/comm_bench.h"

#include <signal.h>

#include <algorithm>
#include <filesystem>
#include <memory>
#include <utility>

#include "absl/strings/str_cat.h"
#include "absl/strings/str_format.h"
#include "common/base/status_macros.h"
#include "common/formats/json_writer.h"
#include "deploy/launch/launcher.h"
#include "lockstep/v1/lockstep.pb.h"
#include "tests/bench/bench_util.h"
#include "tests/bench/child_runner.h"
#include "tests/bench/comm_launch.h"
#include "tests/bench/comm_worker.h"
#include "tests/bench/server_counters.h"

namespace lockstep {
namespace {

absl::Duration Left(absl::Time deadline) {
  return std::max(deadline - absl::Now(), absl::ZeroDuration());
}

// Everything the servers did between the two readings, summed over shards.
struct CounterDelta {
  double accumulate_seconds = 0;
  double apply_seconds = 0;
  double barrier_wait_seconds = 0;
  int64_t chunk_barriers = 0;
  int64_t bytes = 0;  // Received and sent.
};

void AddDelta(const v1::ServerCounters& before, const v1::ServerCounters& after,
              CounterDelta* delta) {
  delta->accumulate_seconds +=
      after.accumulate_seconds() - before.accumulate_seconds();
  delta->apply_seconds += after.apply_seconds() - before.apply_seconds();
  delta->barrier_wait_seconds +=
      after.barrier_wait_seconds() - before.barrier_wait_seconds();
  delta->chunk_barriers += after.chunk_steps() - before.chunk_steps();
  delta->bytes += (after.bytes_received() - before.bytes_received()) +
                  (after.bytes_sent() - before.bytes_sent());
}

// Sums the first `shards` shards' counters between the readings into *delta and
// appends each shard's peak RSS to *peak_rss_bytes.
absl::Status AddShardDeltas(const std::vector<v1::ServerCounters>& before,
                            const std::vector<v1::ServerCounters>& after,
                            const std::vector<pid_t>& pids, int shards,
                            CounterDelta* delta,
                            std::vector<int64_t>* peak_rss_bytes) {
  for (int shard = 0; shard < shards; ++shard) {
    AddDelta(before[shard], after[shard], delta);
    ASSIGN_OR_RETURN(int64_t rss, PeakRssBytes(pids[shard]));
    peak_rss_bytes->push_back(rss);
  }
  return absl::OkStatus();
}

// Every worker's step times (the slowest rank's per step) and its mean
// client timings per step, from the result files in `dir`.
absl::Status ReadWorkerResults(const CommOptions& options,
                               const std::string& dir, CommResult* result) {
  const double steps = options.iters;
  result->step_seconds.assign(options.iters, 0.0);
  for (int rank = 0; rank < options.workers; ++rank) {
    ASSIGN_OR_RETURN(std::string text, ReadWholeFile(ResultFile(dir, rank)));
    ASSIGN_OR_RETURN(CommWorkerResult r, ParseWorkerResult(text));
    if (static_cast<int>(r.step_seconds.size()) != options.iters) {
      return absl::InternalError(absl::StrCat("worker ", rank, " timed ",
                                              r.step_seconds.size(),
                                              " steps, not ", options.iters));
    }
    for (int i = 0; i < options.iters; ++i) {
      result->step_seconds[i] =
          std::max(result->step_seconds[i], r.step_seconds[i]);
    }
    const double share = 1.0 / (steps * options.workers);
    result->client_encode_seconds += r.timings.encode_seconds * share;
    result->client_send_seconds += r.timings.send_seconds * share;
    result->client_wait_seconds += r.timings.wait_seconds * share;
    result->client_decode_seconds += r.timings.decode_seconds * share;
  }
  return absl::OkStatus();
}

// The per-step figures from the step times and the servers' counters.
void SummarizeSteps(const CommOptions& options, const CounterDelta& delta,
                    CommResult* result) {
  const double steps = options.iters;
  result->median_step_seconds = Median(result->step_seconds);
  result->p90_step_seconds = Quantile(result->step_seconds, 0.9);
  result->min_step_seconds = *std::min_element(result->step_seconds.begin(),
                                               result->step_seconds.end());
  for (double s : result->step_seconds) result->mean_step_seconds += s / steps;
  result->model_bytes = options.params * 4;
  result->bytes_per_step = static_cast<double>(delta.bytes) / steps;
  result->algbw_gbps = static_cast<double>(result->model_bytes) /
                       result->median_step_seconds / 1e9;
  result->server_accumulate_seconds = delta.accumulate_seconds / steps;
  result->server_barrier_wait_seconds =
      delta.barrier_wait_seconds /
      static_cast<double>(std::max<int64_t>(delta.chunk_barriers, 1));
  result->chunk_barriers_per_step =
      static_cast<double>(delta.chunk_barriers) / steps;
  result->server_apply_seconds = delta.apply_seconds / steps;
  if (result->loopback.has_value()) {
    result->loopback_floor_seconds =
        result->bytes_per_step / result->loopback->TotalBytesPerSecond();
  }
}

// The hosts of the run: --hosts, or loopback ones; workers start at
// *worker_base (colocated: shard i shares worker i's host, so the workers
// take the first hosts too).
absl::StatusOr<std::vector<BenchHost>> RunHosts(const CommOptions& options,
                                                int* worker_base) {
  *worker_base = options.colocate ? 0 : options.ps;
  std::vector<BenchHost> hosts =
      options.hosts.empty() ? LoopbackHosts(*worker_base + options.workers)
                            : options.hosts;
  if (options.colocate && options.ps > options.workers) {
    return absl::InvalidArgumentError(
        "colocated shards need at least as many workers as shards");
  }
  if (static_cast<int>(hosts.size()) < *worker_base + options.workers) {
    return absl::InvalidArgumentError(absl::StrCat(
        options.ps, " server(s) and ", options.workers,
        " worker(s) need that many hosts; there are ", hosts.size()));
  }
  return hosts;
}

// The measurement itself, with scratch files in `dir`. Children are started
// before this process makes any gRPC channel: it forks.
absl::StatusOr<CommResult> Measure(const CommOptions& options,
                                   const std::string& dir) {
  const absl::Time deadline = absl::Now() + options.timeout;
  CommResult result;
  result.options = options;
  result.load_average = LoadAverage();
  if (options.iperf3) {
    ASSIGN_OR_RETURN(result.loopback,
                     MeasureLoopback(absl::StrCat(dir, "/iperf3.log"),
                                     options.interrupt_fd, absl::Seconds(3)));
  }
  ASSIGN_OR_RETURN(std::unique_ptr<ChildRunner> runner,
                   ChildRunner::Create(absl::StrCat(dir, "/comm.log"),
                                       options.interrupt_fd));
  int worker_base = 0;
  ASSIGN_OR_RETURN(const std::vector<BenchHost> hosts,
                   RunHosts(options, &worker_base));
  ASSIGN_OR_RETURN(
      ServerSet servers,
      StartServers(runner.get(), options.bin_dir,
                   absl::MakeConstSpan(hosts).subspan(0, options.ps),
                   options.workers, dir,
                   {"--exit_when_done=false",
                    absl::StrCat("--sum_order=", options.sum_order)},
                   std::min(Left(deadline), absl::Seconds(60))));
  const std::vector<std::string>& addresses = servers.addresses;
  const BenchHost& reader = hosts[worker_base];  // Reaches every server.
  const absl::Duration read_timeout = absl::Seconds(60);

  ASSIGN_OR_RETURN(
      const std::vector<pid_t> workers,
      StartWorkers(runner.get(), options, hosts, worker_base, addresses, dir));
  RETURN_IF_ERROR(WaitForEveryWorker(runner.get(), "warming up", options, dir,
                                     ReadyFile, Left(deadline)));

  // Every worker is parked before its first timed step: the counters hold
  // exactly the warmup.
  ASSIGN_OR_RETURN(std::vector<v1::ServerCounters> before,
                   ReadServerCounters(runner.get(), reader, options.self_exe,
                                      addresses, dir, read_timeout));
  const CpuTimes cpu_before = ReadCpuTimes();
  for (pid_t pid : workers) kill(pid, kGoSignal);
  // Done when every worker has written its result, not when every worker
  // has exited: gRPC 1.51's grpc_shutdown at exit sometimes waits ~10 s for
  // an executor thread's poll. StopAll below ends such a worker.
  RETURN_IF_ERROR(WaitForEveryWorker(runner.get(), "running the timed steps",
                                     options, dir, ResultFile, Left(deadline)));
  result.cpu_busy = CpuBusyFraction(cpu_before, ReadCpuTimes());
  CounterDelta delta;
  ASSIGN_OR_RETURN(std::vector<v1::ServerCounters> after,
                   ReadServerCounters(runner.get(), reader, options.self_exe,
                                      addresses, dir, read_timeout));
  RETURN_IF_ERROR(AddShardDeltas(before, after, servers.pids, options.ps,
                                 &delta, &result.server_peak_rss_bytes));
  runner->StopAll();
  RETURN_IF_ERROR(ReadWorkerResults(options, dir, &result));
  SummarizeSteps(options, delta, &result);
  return result;
}

std::string Bytes(double bytes) {
  if (bytes >= (1 << 20)) return absl::StrFormat("%.1f MiB", bytes / (1 << 20));
  if (bytes >= (1 << 10)) return absl::StrFormat("%.1f KiB", bytes / (1 << 10));
  return absl::StrFormat("%.0f B", bytes);
}

// The chunk size the workers use: the one asked for, or auto's choice.
int64_t EffectiveChunkBytes(const CommOptions& o) {
  return ResolveChunkBytes(o.chunk_bytes, o.params, o.ps);
}

// The window the workers use: the one asked for, or auto's choice.
int EffectivePushWindow(const CommOptions& o) {
  return ResolvePushWindow(o.push_window, o.workers,
                           std::min(o.params, EffectiveChunkBytes(o) / 4),
                           o.wire_dtype);
}

// Issue 4's bound on a server's peak memory.
int64_t ServerMemoryTargetBytes(int64_t model_bytes) {
  return 3 * model_bytes + (int64_t{64} << 20);
}

}  // namespace

absl::StatusOr<CommResult> RunCommBench(const CommOptions& options) {
  ASSIGN_OR_RETURN(std::string dir, MakeScratchDir("lockstep_bench"));
  absl::StatusOr<CommResult> result = Measure(options, dir);
  // Kept after a failure: the error names the log in it.
  if (result.ok()) {
    std::error_code ignored;
    std::filesystem::remove_all(dir, ignored);
  }
  return result;
}

std::string CommResultJson(const CommResult& r) {
  const CommOptions& o = r.options;
  const int64_t peak_rss =
      r.server_peak_rss_bytes.empty()
          ? 0
          : *std::max_element(r.server_peak_rss_bytes.begin(),
                              r.server_peak_rss_bytes.end());
  JsonObjectWriter json;
  json.Add("mode", "comm")
      .Add("allreduce", o.allreduce)
      .Add("params", o.params)
      .Add("workers", o.workers)
      .Add("ps", o.ps)
      .Add("wire_dtype", WireDTypeName(o.wire_dtype))
      .Add("chunk_bytes", EffectiveChunkBytes(o))
      .AddBool("chunk_bytes_auto", o.chunk_bytes == kAutoChunkBytes)
      // 0: an all-reduce has no push window.
      .Add("push_window", o.allreduce.empty() ? EffectivePushWindow(o) : 0)
      .Add("push_window_auto", o.push_window == kAutoPushWindow)
      .Add("iters", o.iters)
      .Add("warmup", o.warmup)
      .Add("median_step_seconds", r.median_step_seconds)
      .Add("p90_step_seconds", r.p90_step_seconds)
      .Add("mean_step_seconds", r.mean_step_seconds)
      .Add("min_step_seconds", r.min_step_seconds)
      .Add("bytes_per_step", r.bytes_per_step)
      .Add("model_bytes", r.model_bytes)
      .Add("algbw_gbps", r.algbw_gbps)
      .Add("client_encode_seconds", r.client_encode_seconds)
      .Add("client_send_seconds", r.client_send_seconds)
      .Add("client_wait_seconds", r.client_wait_seconds)
      .Add("client_decode_seconds", r.client_decode_seconds)
      .Add("server_accumulate_seconds", r.server_accumulate_seconds)
      .Add("server_barrier_wait_seconds", r.server_barrier_wait_seconds)
      .Add("server_chunk_barriers_per_step", r.chunk_barriers_per_step)
      .Add("server_apply_seconds", r.server_apply_seconds)
      .Add("server_peak_rss_bytes", peak_rss)
      .Add("server_memory_target_bytes", ServerMemoryTargetBytes(r.model_bytes))
      .Add("load_average_at_start", r.load_average);
  if (r.loopback.has_value()) {
    json.Add("loopback_bidir_gbits_per_second",
             r.loopback->TotalBytesPerSecond() * 8 / 1e9)
        .Add("loopback_floor_seconds", r.loopback_floor_seconds)
        .Add("median_over_loopback_floor",
             r.median_step_seconds / r.loopback_floor_seconds);
  }
  return json.ToString();
}

void PrintCommTable(const CommResult& r, std::FILE* out) {
  const CommOptions& o = r.options;
  // An all-reduce has no push window (and moves fp32).
  const std::string transport =
      o.allreduce.empty()
          ? absl::StrFormat("chunks <= %d bytes%s, push window %d%s",
                            EffectiveChunkBytes(o),
                            o.chunk_bytes == kAutoChunkBytes ? " (auto)" : "",
                            EffectivePushWindow(o),
                            o.push_window == kAutoPushWindow ? " (auto)" : "")
          : absl::StrCat("all-reduce ", o.allreduce);
  std::string text = absl::StrFormat(
      "comm: %d params (%s fp32), %d worker(s), %d server(s), wire %s, %s, "
      "%d timed steps after %d warmup (load average %.2f)\n",
      o.params, Bytes(static_cast<double>(r.model_bytes)), o.workers, o.ps,
      WireDTypeName(o.wire_dtype), transport, o.iters, o.warmup,
      r.load_average);
  absl::StrAppendFormat(
      &text,
      "  step seconds           median %.6f  p90 %.6f  mean %.6f  min %.6f\n"
      "  bytes per step         %s (payload into + out of the servers)\n"
      "  algbw                  %.3f GB/s (fp32 gradient bytes / median)\n",
      r.median_step_seconds, r.p90_step_seconds, r.mean_step_seconds,
      r.min_step_seconds, Bytes(r.bytes_per_step), r.algbw_gbps);
  absl::StrAppendFormat(
      &text,
      "  phases, seconds per step\n"
      "    client encode + framing             %.6f  (mean over workers)\n"
      "    client send (starting the RPCs)     %.6f\n"
      "    client wait for the last reply      %.6f\n"
      "    client decode (on gRPC threads)     %.6f  (inside the wait)\n"
      "    server accumulate                   %.6f  (summed over pushes "
      "and shards)\n"
      "    server apply (optimizer, publish)   %.6f  (summed over chunks "
      "and shards)\n"
      "    server barrier wait                 %.6f  (per chunk barrier, "
      "first push to last; %.0f barriers per step)\n",
      r.client_encode_seconds, r.client_send_seconds, r.client_wait_seconds,
      r.client_decode_seconds, r.server_accumulate_seconds,
      r.server_apply_seconds, r.server_barrier_wait_seconds,
      r.chunk_barriers_per_step);
  for (size_t shard = 0; shard < r.server_peak_rss_bytes.size(); ++shard) {
    absl::StrAppendFormat(
        &text,
        "  server %d peak RSS      %s (target 3 x model + 64 MiB = %s)\n",
        shard, Bytes(static_cast<double>(r.server_peak_rss_bytes[shard])),
        Bytes(static_cast<double>(ServerMemoryTargetBytes(r.model_bytes))));
  }
  if (r.loopback.has_value()) {
    absl::StrAppendFormat(
        &text,
        "  loopback (iperf3 --bidir)  %.2f Gbit/s total -> floor %.6f s; "
        "median / floor = %.2f\n",
        r.loopback->TotalBytesPerSecond() * 8 / 1e9, r.loopback_floor_seconds,
        r.median_step_seconds / r.loopback_floor_seconds);
  }
  std::fputs(text.c_str(), out);
  std::fflush(out);
}

}  // namespace lockstep
