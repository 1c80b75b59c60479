// The resumed jobs of lr_resume_integration_test.cc and
// reshard_integration_test.cc: two workers with Adam (its slots and step
// count carry over) and a cosine schedule over both epochs, 160 examples,
// 2 workers x 8, 10 steps an epoch, chunks of 1000 bytes (several a shard).
#ifndef LOCKSTEP_TESTS_INTEGRATION_RESUME_JOBS_H_
#define LOCKSTEP_TESTS_INTEGRATION_RESUME_JOBS_H_

#include <cstdint>
#include <string>
#include <vector>

#include "absl/strings/str_cat.h"
#include "absl/strings/str_join.h"
#include "gtest/gtest.h"
#include "tests/integration/subprocess.h"
#include "tests/integration/training_jobs.h"

namespace lockstep {

// A worker of such a job against `servers` (every shard, in order),
// dumping its final weights to `dump`.
inline std::vector<std::string> ResumeWorker(const std::string& servers,
                                             int rank, int epochs,
                                             const std::string& dump) {
  return {kBin + "/lockstep_worker",
          "--servers=" + servers,
          "--workers=2",
          absl::StrCat("--rank=", rank),
          "--dataset=synthetic",
          "--synthetic_examples=160",
          "--layers=23,17,5",
          "--optimizer=adam",
          "--lr_schedule=cosine",
          "--lr_decay_steps=16",
          "--lr_warmup_steps=4",
          "--batch_size=8",
          absl::StrCat("--epochs=", epochs),
          "--seed=7",
          "--chunk_bytes=1000",
          "--progress=none",
          "--dump_weights=" + dump};
}

// What a job of RunResumeJob left: rank 0's final weights (empty when the
// job failed), the steps each worker took, and shard 0's log.
struct ResumeJob {
  std::vector<float> weights;
  std::vector<int64_t> steps;
  std::string server_log;
};

// One job of two workers against `shards` servers, each started with
// --sum_order=rank and `server_flags`.
inline ResumeJob RunResumeJob(int epochs,
                              const std::vector<std::string>& server_flags,
                              int shards = 1) {
  const std::string dir = MakeTempDir();
  std::vector<std::string> flags = {"--sum_order=rank"};
  flags.insert(flags.end(), server_flags.begin(), server_flags.end());
  std::vector<Server> servers;
  std::vector<std::string> addresses;
  for (int s = 0; s < shards; ++s) {
    servers.push_back(StartServer(2, dir, s, shards, flags));
    addresses.push_back(servers.back().address);
  }
  std::vector<Subprocess> procs;
  for (int rank = 0; rank < 2; ++rank) {
    std::vector<std::string> argv =
        ResumeWorker(absl::StrJoin(addresses, ","), rank, epochs,
                     absl::StrCat(dir, "/w", rank));
    argv.push_back(absl::StrCat("--summary_json=", dir, "/s", rank));
    procs.push_back(Subprocess::Start(argv));
  }
  ResumeJob job;
  if (!WaitForWorkers(procs, servers)) return job;
  for (Server& server : servers) {
    EXPECT_EQ(server.process.Wait(kDeadline), 0) << server.process.Output();
  }
  job.server_log = servers[0].process.Output();
  job.weights = ReadWeights(dir + "/w0");
  EXPECT_EQ(ReadWeights(dir + "/w1"), job.weights);
  for (int rank = 0; rank < 2; ++rank) {
    const std::string summary = ReadFile(absl::StrCat(dir, "/s", rank));
    EXPECT_EQ(JsonInt(summary, "final_version"), 10 * epochs) << summary;
    job.steps.push_back(JsonInt(summary, "steps"));
  }
  return job;
}

}  // namespace lockstep

#endif  // LOCKSTEP_TESTS_INTEGRATION_RESUME_JOBS_H_
