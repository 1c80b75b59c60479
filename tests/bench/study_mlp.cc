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
  return ReadJobResult(dir, summary_path);
}

}  // namespace lockstep
