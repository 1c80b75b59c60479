// The job's shape from what Kubeflow Trainer gives a pod, through real
// processes: servers started with --workers=auto learn the worker count
// from the first worker that calls, and workers take their rank and count
// from PET_NODE_RANK and PET_NNODES (Trainer's torch policy; its
// PET_NPROC_PER_NODE is torchrun's and left alone) and the servers from
// LOCKSTEP_SERVERS. Such a job trains to the weights of the
// same job given every number as a flag (Train(), training_jobs.h): a
// plain one and an elastic one (whose workers call JoinGroup first).
#include <string>
#include <vector>

#include "absl/strings/str_cat.h"
#include "common/base/exit_codes.h"
#include "gmock/gmock.h"
#include "gtest/gtest.h"
#include "tests/integration/subprocess.h"
#include "tests/integration/training_jobs.h"

namespace lockstep {
namespace {

using ::testing::HasSubstr;

constexpr int kWorkers = 2;
constexpr int kShards = 2;

// Train()'s job for kWorkers workers of batch 8 with Adam over kShards
// shards, each server with --workers=auto and each worker told nothing
// of the shape on its command line. Returns rank 0's weights; `logs` gets
// every process's output.
std::vector<float> TrainShapedByEnvironment(
    const std::vector<std::string>& extra, std::string* logs) {
  const std::string dir = MakeTempDir();
  std::vector<Server> servers;
  std::vector<std::string> addresses;
  for (int shard = 0; shard < kShards; ++shard) {
    servers.push_back(StartServer("auto", dir, shard, kShards));
    addresses.push_back(servers.back().address);
  }
  std::vector<Subprocess> workers;
  for (int rank = 0; rank < kWorkers; ++rank) {
    std::vector<std::string> argv = {
        kBin + "/lockstep_worker",
        absl::StrCat("--dump_weights=", dir, "/w", rank)};
    for (std::string& f : TrainFlags(8, "adam")) argv.push_back(f);
    argv.insert(argv.end(), extra.begin(), extra.end());
    workers.push_back(Subprocess::Start(
        argv, {"LOCKSTEP_SERVERS=" + absl::StrJoin(addresses, ","),
               absl::StrCat("PET_NNODES=", kWorkers),
               absl::StrCat("PET_NODE_RANK=", rank),
               // Trainer's default with 8 CPUs asked: torchrun's, not ours.
               "PET_NPROC_PER_NODE=8"}));
  }
  const bool finished = WaitForWorkers(workers, servers);
  for (Server& server : servers) {
    if (finished) {
      EXPECT_EQ(server.process.Wait(kDeadline), kExitOk);
    }
    *logs += server.process.Output();
  }
  for (Subprocess& worker : workers) *logs += worker.Output();
  return ReadWeights(dir + "/w0");
}

TEST(JobShapeTest, ServersLearnTheWorkerCountAndWorkersReadTrainersVariables) {
  const std::vector<float> expected = Train(kWorkers, 8, "adam", kShards);
  ASSERT_FALSE(expected.empty());
  std::string logs;
  EXPECT_EQ(TrainShapedByEnvironment({}, &logs), expected) << logs;
  EXPECT_THAT(logs, HasSubstr("--workers=auto: 2 worker(s), from rank "));
  EXPECT_THAT(logs, HasSubstr("'s registration"));
  EXPECT_THAT(logs, HasSubstr("(LOCKSTEP_SERVERS)"));
  EXPECT_THAT(logs, HasSubstr("PET_NPROC_PER_NODE=8 is torchrun's"));
}

TEST(JobShapeTest, AnElasticJobTellsTheCountThroughItsGroup) {
  const std::vector<std::string> elastic = {"--min_workers=1"};
  const std::vector<float> expected =
      Train(kWorkers, 8, "adam", kShards, elastic);
  ASSERT_FALSE(expected.empty());
  std::string logs;
  EXPECT_EQ(TrainShapedByEnvironment(elastic, &logs), expected) << logs;
  EXPECT_THAT(logs, HasSubstr("'s JoinGroup of \"ps\""));
}

TEST(JobShapeTest, ABadNodeCountIsRefused) {
  RunResult pod =
      RunProcess({kBin + "/lockstep_worker", "--servers=127.0.0.1:1"},
                 {"PET_NNODES=two", "PET_NODE_RANK=0"});
  EXPECT_EQ(pod.exit_code, kExitPermanent) << pod.output;
  EXPECT_THAT(pod.output, HasSubstr("PET_NNODES=two is not a whole number"));
}

}  // namespace
}  // namespace lockstep
