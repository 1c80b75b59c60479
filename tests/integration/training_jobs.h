// Helpers of the integration tests that train through real lockstep_server
// and lockstep_worker processes on loopback: start a server, run a job of
// workers, read their weights and summaries. Needs LOCKSTEP_BIN_DIR, which
// lockstep_add_test defines.
#ifndef LOCKSTEP_TESTS_INTEGRATION_TRAINING_JOBS_H_
#define LOCKSTEP_TESTS_INTEGRATION_TRAINING_JOBS_H_

#include <algorithm>
#include <cmath>
#include <cstdint>
#include <cstdlib>
#include <cstring>
#include <optional>
#include <string>
#include <utility>
#include <vector>

#include "absl/strings/ascii.h"
#include "absl/strings/str_cat.h"
#include "absl/strings/str_join.h"
#include "absl/time/clock.h"
#include "absl/time/time.h"
#include "gtest/gtest.h"
#include "tests/integration/subprocess.h"

namespace lockstep {

inline const std::string kBin = LOCKSTEP_BIN_DIR;
inline const absl::Duration kDeadline = absl::Seconds(120);

// A server on a free loopback port, started with --port_file.
struct Server {
  Subprocess process;
  std::string address;
};

// `workers`: a count, or "auto" (learned from the first worker).
inline Server StartServer(const std::string& workers, const std::string& dir,
                          int shard = 0, int num_shards = 1,
                          const std::vector<std::string>& extra = {}) {
  const std::string port_file = absl::StrCat(dir, "/port", shard);
  std::vector<std::string> argv = {kBin + "/lockstep_server",
                                   "--listen=127.0.0.1:0",
                                   "--workers=" + workers,
                                   absl::StrCat("--shard=", shard),
                                   absl::StrCat("--num_shards=", num_shards),
                                   "--port_file=" + port_file};
  argv.insert(argv.end(), extra.begin(), extra.end());
  Server s{Subprocess::Start(argv), ""};
  const absl::Time deadline = absl::Now() + absl::Seconds(30);
  std::string port;
  while (absl::Now() < deadline) {
    port = ReadFile(port_file);
    if (!port.empty()) break;
    if (s.process.Wait(absl::Milliseconds(10)).has_value()) break;
  }
  s.address = absl::StrCat("127.0.0.1:", absl::StripAsciiWhitespace(port));
  return s;
}

inline Server StartServer(int workers, const std::string& dir, int shard = 0,
                          int num_shards = 1,
                          const std::vector<std::string>& extra = {}) {
  return StartServer(absl::StrCat(workers), dir, shard, num_shards, extra);
}

inline std::vector<float> ReadWeights(const std::string& path) {
  const std::string bytes = ReadFile(path);
  // Two missing dumps would compare equal: a dump must hold weights.
  if (bytes.empty() || bytes.size() % sizeof(float) != 0) {
    ADD_FAILURE() << path << " holds " << bytes.size() << " bytes of weights";
  }
  std::vector<float> w(bytes.size() / sizeof(float));
  std::memcpy(w.data(), bytes.data(), w.size() * sizeof(float));
  return w;
}

// max |a - b| / max |b|: the difference relative to the weights' scale.
inline double MaxRelativeDifference(const std::vector<float>& a,
                                    const std::vector<float>& b) {
  double diff = 0, scale = 0;
  for (size_t i = 0; i < a.size(); ++i) {
    diff = std::max(diff, std::fabs(double{a[i]} - b[i]));
    scale = std::max(scale, std::fabs(double{b[i]}));
  }
  return diff / scale;
}

// Waits for every worker of a job, at most kDeadline in all. When one fails
// (a crash, say), the others would wait for it at the step barrier, so they
// and the servers are killed at once: the test reports the failure, with
// its output, instead of running into its deadline. True if all exited 0.
inline bool WaitForWorkers(std::vector<Subprocess>& procs,
                           std::vector<Server>& servers) {
  const absl::Time deadline = absl::Now() + kDeadline;
  std::vector<bool> done(procs.size(), false);
  size_t left = procs.size();
  while (left > 0 && absl::Now() < deadline) {
    for (size_t rank = 0; rank < procs.size(); ++rank) {
      if (done[rank]) continue;
      const std::optional<int> code = procs[rank].Wait(absl::Milliseconds(20));
      if (!code.has_value()) continue;
      done[rank] = true;
      --left;
      if (*code == 0) continue;
      ADD_FAILURE() << "worker " << rank << " exited with " << *code
                    << "; stopping the job\n"
                    << procs[rank].Output();
      for (Subprocess& p : procs) p.Kill();
      for (Server& server : servers) server.process.Kill();
      return false;
    }
  }
  if (left == 0) return true;
  ADD_FAILURE() << left << " workers still running after " << kDeadline;
  for (size_t rank = 0; rank < procs.size(); ++rank) {
    if (!done[rank])
      ADD_FAILURE() << "worker " << rank << ":\n" << procs[rank].Output();
  }
  return false;
}

// Train()'s training flags for batch `batch` and `optimizer`: 20 steps of
// a small MLP on synthetic data, the same in every test that compares with
// Train().
inline std::vector<std::string> TrainFlags(int batch,
                                           const std::string& optimizer) {
  return {"--dataset=synthetic",
          "--synthetic_examples=640",
          "--layers=23,17,5",
          "--optimizer=" + optimizer,
          absl::StrCat("--batch_size=", batch),
          "--max_steps=20",
          "--epochs=3",
          "--seed=7",
          "--chunk_bytes=1000",
          "--progress=none"};
}

// Trains `workers` workers with batch `batch` each for 20 steps against
// `shards` server shards and returns rank 0's final weights (checking every
// rank ends with the same ones). `worker` is the worker binary in kBin.
inline std::vector<float> Train(int workers, int batch,
                                const std::string& optimizer, int shards = 1,
                                const std::vector<std::string>& extra = {},
                                const std::string& worker = "lockstep_worker") {
  const std::string dir = MakeTempDir();
  std::vector<Server> servers;
  std::vector<std::string> addresses;
  for (int shard = 0; shard < shards; ++shard) {
    servers.push_back(StartServer(workers, dir, shard, shards));
    addresses.push_back(servers.back().address);
  }
  std::vector<Subprocess> procs;
  for (int rank = 0; rank < workers; ++rank) {
    std::vector<std::string> argv = {
        kBin + "/" + worker, "--servers=" + absl::StrJoin(addresses, ","),
        absl::StrCat("--workers=", workers), absl::StrCat("--rank=", rank),
        absl::StrCat("--dump_weights=", dir, "/w", rank)};
    for (std::string& f : TrainFlags(batch, optimizer)) argv.push_back(f);
    argv.insert(argv.end(), extra.begin(), extra.end());
    procs.push_back(Subprocess::Start(argv));
  }
  const bool finished = WaitForWorkers(procs, servers);
  for (Server& server : servers) {
    if (!finished) break;  // Already killed.
    EXPECT_EQ(server.process.Wait(kDeadline), 0)
        << "a server must exit by itself once every worker left\n"
        << server.process.Output();
  }
  std::vector<float> w0 = ReadWeights(dir + "/w0");
  for (int rank = 1; rank < workers; ++rank) {
    EXPECT_EQ(ReadWeights(absl::StrCat(dir, "/w", rank)), w0)
        << "rank " << rank << " holds other weights than rank 0";
  }
  return w0;
}

// The integer value of "key" in a flat JSON object (-1 when absent).
inline int64_t JsonInt(const std::string& json, const std::string& key) {
  const std::string quoted = "\"" + key + "\": ";
  const size_t at = json.find(quoted);
  if (at == std::string::npos) return -1;
  return std::strtoll(json.c_str() + at + quoted.size(), nullptr, 10);
}

// Runs `workers` workers against one server with extra flags and returns
// each rank's summary JSON text.
inline std::vector<std::string> RunJob(int workers,
                                       const std::vector<std::string>& extra) {
  const std::string dir = MakeTempDir();
  Server server = StartServer(workers, dir);
  std::vector<Subprocess> procs;
  for (int rank = 0; rank < workers; ++rank) {
    std::vector<std::string> argv = {
        kBin + "/lockstep_worker",
        "--servers=" + server.address,
        absl::StrCat("--workers=", workers),
        absl::StrCat("--rank=", rank),
        "--dataset=synthetic",
        "--synthetic_examples=640",
        "--layers=23,17,5",
        "--batch_size=8",
        "--max_steps=20",
        "--progress=none",
        absl::StrCat("--summary_json=", dir, "/s", rank)};
    argv.insert(argv.end(), extra.begin(), extra.end());
    procs.push_back(Subprocess::Start(argv));
  }
  std::vector<Server> servers;
  servers.push_back(std::move(server));
  const bool finished = WaitForWorkers(procs, servers);
  std::vector<std::string> summaries;
  for (int rank = 0; rank < workers; ++rank) {
    summaries.push_back(ReadFile(absl::StrCat(dir, "/s", rank)));
  }
  if (finished) {
    EXPECT_EQ(servers[0].process.Wait(kDeadline), 0)
        << servers[0].process.Output();
  }
  return summaries;
}

}  // namespace lockstep

#endif  // LOCKSTEP_TESTS_INTEGRATION_TRAINING_JOBS_H_
