#include "tests/bench/study_mlp.h"

#include <algorithm>
#include <filesystem>
#include <memory>
#include <utility>

#include "absl/strings/match.h"
#include "absl/strings/numbers.h"
#include "absl/strings/str_cat.h"
#include "absl/strings/str_join.h"
#include "absl/strings/str_split.h"
#include "absl/strings/strip.h"
#include "absl/strings/ascii.h"
#include "common/base/status_macros.h"
#include "tests/bench/bench_util.h"
#include "tests/bench/child_runner.h"

namespace lockstep {
namespace {

absl::Duration Left(absl::Time deadline) {
  return std::max(deadline - absl::Now(), absl::ZeroDuration());
}

// Parses "step,seconds,loss" lines after the header.
absl::Status ParseStepLog(const std::string& text, MlpJobResult* result) {
  bool header = true;
  for (absl::string_view line : absl::StrSplit(text, '\n', absl::SkipEmpty())) {
    if (header) {
      header = false;
      continue;
    }
    std::vector<absl::string_view> f = absl::StrSplit(line, ',');
    int64_t step = 0;
    double seconds = 0, loss = 0;
    if (f.size() != 3 || !absl::SimpleAtoi(f[0], &step) ||
        !absl::SimpleAtod(f[1], &seconds) || !absl::SimpleAtod(f[2], &loss)) {
      return absl::InternalError(
          absl::StrCat("bad step-log line \"", line, "\""));
    }
    result->steps.push_back(step);
    result->seconds.push_back(seconds);
    result->losses.push_back(loss);
  }
  if (result->steps.empty()) {
    return absl::InternalError("the step log is empty");
  }
  return absl::OkStatus();
}

std::vector<std::string> WorkerArgs(const MlpJob& job, int rank,
                                    const BenchHost& host,
                                    const std::vector<std::string>& servers,
                                    const std::string& bin_dir,
                                    const std::string& dir) {
  std::vector<std::string> argv = {
      absl::StrCat(bin_dir, "/lockstep_worker"),
      absl::StrCat("--servers=", absl::StrJoin(servers, ",")),
      absl::StrCat("--rank=", rank),
      absl::StrCat("--workers=", job.workers),
      absl::StrCat("--sync=", job.sync),
      absl::StrCat("--epochs=", job.epochs),
      absl::StrCat("--max_steps=", job.max_steps),
      "--device=cpu",
      "--progress=none",
      "--connect_timeout_s=60",
      "--step_timeout_s=120"};
  if (job.sync == "allreduce") {
    argv.push_back(absl::StrCat("--allreduce=", job.allreduce));
    argv.push_back(absl::StrCat("--allreduce_host=", host.address));
  }
  AllowPlaintextOn(host, &argv);
  if (job.backup_workers > 0) {
    argv.push_back(absl::StrCat("--backup_workers=", job.backup_workers));
  }
  if (job.sync == "ssp") {
    argv.push_back(absl::StrCat("--staleness=", job.staleness));
  }
  if (job.local_steps > 0) {
    argv.push_back(absl::StrCat("--local_steps=", job.local_steps));
  }
  if (job.eval_every_epoch) argv.push_back("--eval_every_epoch");
  if (!job.straggle.empty()) {
    argv.push_back(absl::StrCat("--straggle=", job.straggle));
  }
  if (job.straggle_random_ms > 0) {
    argv.push_back(
        absl::StrCat("--straggle_random_ms=", job.straggle_random_ms));
  }
  if (rank == 0) {
    argv.push_back(absl::StrCat("--step_log=", dir, "/steps.csv"));
    argv.push_back(absl::StrCat("--summary_json=", dir, "/summary.json"));
  }
  for (const std::string& flag : job.data_flags) argv.push_back(flag);
  return argv;
}

// Rank 0's "Epoch K/N - test loss L - test accuracy A" lines, in order.
std::vector<double> EpochAccuracies(const std::string& output) {
  std::vector<double> accuracies;
  constexpr absl::string_view kTag = " - test accuracy ";
  for (absl::string_view line :
       absl::StrSplit(output, '\n', absl::SkipEmpty())) {
    const size_t at = line.find(kTag);
    double accuracy = 0;
    if (absl::StartsWith(line, "Epoch ") && at != absl::string_view::npos &&
        absl::SimpleAtod(line.substr(at + kTag.size()), &accuracy)) {
      accuracies.push_back(accuracy);
    }
  }
  return accuracies;
}

// The bytes `host` has sent on its interface so far (the simulated
// cluster's eth0), read inside its namespace.
absl::StatusOr<double> HostTxBytes(ChildRunner* runner, const BenchHost& host,
                                   const std::string& name,
                                   absl::Duration timeout) {
  ASSIGN_OR_RETURN(
      pid_t pid,
      runner->Start(name, OnHost(host, {"cat",
                                        "/sys/class/net/eth0/statistics/"
                                        "tx_bytes"})));
  RETURN_IF_ERROR(runner->WaitForExit(name, pid, timeout));
  const std::string text = runner->OutputOf(name);
  double bytes = 0;
  if (!absl::SimpleAtod(absl::StripAsciiWhitespace(text), &bytes)) {
    return absl::InternalError(
        absl::StrCat("cannot read ", host.address, "'s sent bytes: \"", text,
                     "\""));
  }
  return bytes;
}

// Rank 0's step log, from `dir`, and its summary at `summary_path`.
absl::StatusOr<MlpJobResult> ReadJobResult(const std::string& dir,
                                           const std::string& summary_path) {
  MlpJobResult result;
  ASSIGN_OR_RETURN(std::string log,
                   ReadWholeFile(absl::StrCat(dir, "/steps.csv")));
  RETURN_IF_ERROR(ParseStepLog(log, &result));
  ASSIGN_OR_RETURN(std::string summary, ReadWholeFile(summary_path));
  ASSIGN_OR_RETURN(result.test_accuracy,
                   FindJsonNumber(summary, {"test_accuracy"}));
  ASSIGN_OR_RETURN(result.wall_seconds,
                   FindJsonNumber(summary, {"wall_seconds"}));
  return result;
}

}  // namespace

absl::StatusOr<MlpJobResult> RunMlpJob(const MlpJob& job,
                                       const std::vector<BenchHost>& hosts,
                                       const std::string& bin_dir,
                                       const std::string& dir, int interrupt_fd,
                                       absl::Duration timeout) {
  const absl::Time deadline = absl::Now() + timeout;
  const int shards = job.sync == "allreduce" ? 1 : job.shards;
  if (static_cast<int>(hosts.size()) < shards + job.workers) {
    return absl::InvalidArgumentError(
        absl::StrCat("the job needs ", shards + job.workers,
                     " hosts, there are ", hosts.size()));
  }
  ASSIGN_OR_RETURN(
      std::unique_ptr<ChildRunner> runner,
      ChildRunner::Create(absl::StrCat(dir, "/job.log"), interrupt_fd));
  ASSIGN_OR_RETURN(ServerSet servers,
                   StartServers(runner.get(), bin_dir,
                                absl::MakeConstSpan(hosts).subspan(0, shards),
                                job.workers, dir, {"--step_timeout_s=120"},
                                std::min(Left(deadline), absl::Seconds(60))));
  // Each worker host's link counter before and after (simulated hosts
  // only: loopback hosts share one interface).
  const bool counted = !hosts[shards].prefix.empty();
  std::vector<double> tx_before(job.workers, 0);
  for (int rank = 0; counted && rank < job.workers; ++rank) {
    ASSIGN_OR_RETURN(tx_before[rank],
                     HostTxBytes(runner.get(), hosts[shards + rank],
                                 absl::StrCat("tx_before", rank),
                                 std::min(Left(deadline), absl::Seconds(30))));
  }
  std::vector<pid_t> workers;
  for (int rank = 0; rank < job.workers; ++rank) {
    const BenchHost& host = hosts[shards + rank];
    ASSIGN_OR_RETURN(pid_t pid,
                     runner->Start(absl::StrCat("worker", rank),
                                   OnHost(host, WorkerArgs(job, rank, host,
                                                           servers.addresses,
                                                           bin_dir, dir))));
    workers.push_back(pid);
  }
  // Done when rank 0 has written its summary (after its step log) and the
  // servers have seen every worker leave and exited. Not when every worker
  // has exited: on the simulated hosts gRPC 1.51's grpc_shutdown, at a
  // worker's exit, sometimes waits ~10 s for an executor thread's poll,
  // which would only add idle seconds to each run.
  const std::string summary_path = absl::StrCat(dir, "/summary.json");
  RETURN_IF_ERROR(runner->WaitUntil(
      "training",
      [&]() {
        return std::filesystem::exists(summary_path) &&
               std::none_of(servers.pids.begin(), servers.pids.end(),
                            [&](pid_t pid) { return runner->IsRunning(pid); });
      },
      Left(deadline)));
  // A short grace for the workers' exits; the runner stops what is left.
  absl::Status exited = runner->WaitUntil(
      "workers exiting",
      [&]() {
        return std::none_of(workers.begin(), workers.end(),
                            [&](pid_t pid) { return runner->IsRunning(pid); });
      },
      std::min(Left(deadline), absl::Seconds(1)));
  if (!exited.ok() && !absl::StrContains(exited.message(), "timed out")) {
    return exited;
  }
  // A worker stuck there ignores its first SIGTERM (it only asks to leave).
  runner->StopAll(absl::Milliseconds(500));
  ASSIGN_OR_RETURN(MlpJobResult result, ReadJobResult(dir, summary_path));
  if (counted) {
    double sent = 0;
    for (int rank = 0; rank < job.workers; ++rank) {
      ASSIGN_OR_RETURN(const double after,
                       HostTxBytes(runner.get(), hosts[shards + rank],
                                   absl::StrCat("tx_after", rank),
                                   std::min(Left(deadline), absl::Seconds(30))));
      sent += after - tx_before[rank];
    }
    result.tx_bytes_per_worker = sent / job.workers;
  }
  if (job.eval_every_epoch) {
    result.epoch_accuracy = EpochAccuracies(runner->OutputOf("worker0"));
    result.epoch_accuracy.push_back(result.test_accuracy);
    // Epoch k ends after steps_per_epoch * k steps; the log counts from 1
    // or 0 alike, so its entries are taken by position.
    const size_t epochs = result.epoch_accuracy.size();
    const size_t per_epoch = result.steps.size() / epochs;
    for (size_t k = 1; k <= epochs && per_epoch > 0; ++k) {
      result.epoch_seconds.push_back(
          result.seconds[std::min(k * per_epoch, result.steps.size()) - 1]);
    }
  }
  return result;
}

}  // namespace lockstep
