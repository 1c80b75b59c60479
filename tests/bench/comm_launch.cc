#include "tests/bench/comm_launch.h"

#include <filesystem>
#include <utility>

#include "absl/strings/str_cat.h"
#include "absl/strings/str_join.h"
#include "common/base/status_macros.h"
#include "common/model/chunk_plan.h"
#include "common/wire/wire_codec.h"
#include "worker/exchange/ps/ps_client.h"

namespace lockstep {

std::vector<std::string> WorkerArgv(const CommOptions& options,
                                    const std::vector<std::string>& addresses,
                                    const std::string& dir, int rank,
                                    const BenchHost& host) {
  std::vector<std::string> argv = {
      options.self_exe,
      "comm-worker",
      absl::StrCat("--servers=", absl::StrJoin(addresses, ",")),
      absl::StrCat("--rank=", rank),
      absl::StrCat("--workers=", options.workers),
      absl::StrCat("--params=", options.params),
      absl::StrCat("--wire_dtype=", WireDTypeName(options.wire_dtype)),
      absl::StrCat("--chunk_bytes=", options.chunk_bytes == kAutoChunkBytes
                                         ? std::string("auto")
                                         : absl::StrCat(options.chunk_bytes)),
      absl::StrCat("--warmup=", options.warmup),
      absl::StrCat("--iters=", options.iters),
      absl::StrCat("--push_window=", options.push_window == kAutoPushWindow
                                         ? std::string("auto")
                                         : absl::StrCat(options.push_window)),
      absl::StrCat("--out_dir=", dir),
      absl::StrCat("--allreduce_backend=", options.allreduce),
      absl::StrCat("--host=", host.address)};
  AllowPlaintextOn(host, &argv);
  return argv;
}

absl::StatusOr<std::vector<pid_t>> StartWorkers(
    ChildRunner* runner, const CommOptions& options,
    const std::vector<BenchHost>& hosts, int worker_base,
    const std::vector<std::string>& addresses, const std::string& dir) {
  std::vector<pid_t> workers;
  for (int rank = 0; rank < options.workers; ++rank) {
    const BenchHost& host = hosts[worker_base + rank];
    ASSIGN_OR_RETURN(pid_t pid,
                     runner->Start(absl::StrCat("worker", rank),
                                   OnHost(host, WorkerArgv(options, addresses,
                                                           dir, rank, host))));
    workers.push_back(pid);
  }
  return workers;
}

absl::Status WaitForEveryWorker(ChildRunner* runner, const char* what,
                                const CommOptions& options,
                                const std::string& dir,
                                std::string (*file)(const std::string&, int),
                                absl::Duration timeout) {
  return runner->WaitUntil(
      what,
      [&]() {
        for (int rank = 0; rank < options.workers; ++rank) {
          if (!std::filesystem::exists(file(dir, rank))) return false;
        }
        return true;
      },
      timeout);
}

}  // namespace lockstep
