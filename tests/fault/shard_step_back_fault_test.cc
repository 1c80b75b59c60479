// Fault tests of a job with two server shards whose checkpoints are of
// different versions when they restart: one shard killed and restored
// while the other runs on, and both killed with the newest checkpoint of
// one of them lost. The shards checkpoint the same versions, the workers
// step them back to the newest version both hold, and the job ends with
// the fault-free weights, bit for bit.
#include <signal.h>
#include <unistd.h>

#include <memory>
#include <string>
#include <vector>

#include "absl/strings/match.h"
#include "absl/strings/str_cat.h"
#include "absl/strings/str_format.h"
#include "absl/time/clock.h"
#include "gmock/gmock.h"
#include "grpcpp/grpcpp.h"
#include "gtest/gtest.h"
#include "lockstep/v1/lockstep.grpc.pb.h"
#include "tests/fault/fault_flags.h"
#include "tests/integration/training_jobs.h"

namespace lockstep {
namespace {

using ::testing::HasSubstr;

constexpr int kShards = 2;

// Two workers of Flags() over two shards, rank 1 slow enough (20 ms a
// step) for a kill to land between two checkpoints.
class TwoShardJob {
 public:
  TwoShardJob() {
    for (int s = 0; s < kShards; ++s) {
      Server server = StartServer(2, dir_, s, kShards, ServerFlags());
      addresses_.push_back(server.address);
      shards_.push_back(
          std::make_unique<Subprocess>(std::move(server.process)));
    }
  }
  ~TwoShardJob() {
    for (auto& p : shards_) p->Kill();
    for (auto& p : workers_) p->Kill();
  }

  void StartWorkers() {
    for (int r = 0; r < 2; ++r) {
      std::vector<std::string> argv = {
          kBin + "/lockstep_worker",
          "--servers=" + addresses_[0] + "," + addresses_[1], "--workers=2",
          absl::StrCat("--rank=", r),
          absl::StrCat("--dump_weights=", dir_, "/weights", r)};
      for (const std::string& f : Flags({"--straggle=1:20"})) argv.push_back(f);
      workers_.push_back(std::make_unique<Subprocess>(Subprocess::Start(argv)));
    }
  }
  // SIGKILLs shard `s` and waits for it to be gone.
  void KillShard(int s) {
    ::kill(shards_[s]->pid(), SIGKILL);
    shards_[s]->Wait(absl::Seconds(10));
  }
  // Starts shard `s` again on its address, restoring its checkpoint.
  void RestartShard(int s) {
    std::vector<std::string> argv = {
        kBin + "/lockstep_server", "--listen=" + addresses_[s], "--workers=2",
        absl::StrCat("--shard=", s), absl::StrCat("--num_shards=", kShards)};
    for (const std::string& f : ServerFlags()) argv.push_back(f);
    restarted_.push_back(std::make_unique<Subprocess>(Subprocess::Start(argv)));
    shards_[s] = std::move(restarted_.back());
    restarted_.pop_back();
  }
  std::string Checkpoint(int s, int64_t version) const {
    return absl::StrFormat("%s/ckpt/shard-%d-of-%d/ckpt-%012d.lsc", dir_, s,
                           kShards, version);
  }
  // Until shard `s` has written its checkpoint of `version`.
  bool WaitForCheckpoint(int s, int64_t version) const {
    const std::string path = Checkpoint(s, version);
    const absl::Time deadline = absl::Now() + absl::Seconds(60);
    while (absl::Now() < deadline) {
      if (::access(path.c_str(), F_OK) == 0) return true;
      absl::SleepFor(absl::Milliseconds(5));
    }
    return false;
  }
  // Until shard `s` is at `version` or past it.
  bool WaitForVersion(int s, int64_t version) const {
    auto stub = v1::ParameterServer::NewStub(
        grpc::CreateChannel(addresses_[s], grpc::InsecureChannelCredentials()));
    const absl::Time deadline = absl::Now() + absl::Seconds(60);
    while (absl::Now() < deadline) {
      grpc::ClientContext context;
      context.set_deadline(absl::ToChronoTime(absl::Now() + absl::Seconds(1)));
      v1::StatusResponse status;
      if (stub->GetStatus(&context, v1::StatusRequest(), &status).ok() &&
          status.version() >= version) {
        return true;
      }
      absl::SleepFor(absl::Milliseconds(5));
    }
    return false;
  }
  // Waits for every process to exit 0 and returns rank 0's final weights,
  // which rank 1's must equal.
  std::vector<float> FinalWeights() {
    for (int r = 0; r < 2; ++r) {
      EXPECT_EQ(workers_[r]->Wait(absl::Seconds(120)), 0)
          << workers_[r]->Output();
      worker_logs_ += workers_[r]->Output();
    }
    for (int s = 0; s < kShards; ++s) {
      EXPECT_EQ(shards_[s]->Wait(absl::Seconds(60)), 0) << shards_[s]->Output();
      shard_logs_ += shards_[s]->Output();
    }
    const std::vector<float> weights = ReadWeights(dir_ + "/weights0");
    EXPECT_EQ(ReadWeights(dir_ + "/weights1"), weights);
    return weights;
  }

  std::string worker_logs_, shard_logs_;

 private:
  std::vector<std::string> ServerFlags() const {
    return {"--checkpoint_dir=" + dir_ + "/ckpt", "--checkpoint_every_steps=10",
            "--sum_order=rank"};
  }

  const std::string dir_ = MakeTempDir();
  std::vector<std::string> addresses_;
  std::vector<std::unique_ptr<Subprocess>> shards_, workers_, restarted_;
};

// The fault-free weights of the same job.
const std::vector<float>& TwoShardReference() {
  static const std::vector<float>* reference = [] {
    TwoShardJob job;
    job.StartWorkers();
    return new std::vector<float>(job.FinalWeights());
  }();
  return *reference;
}

TEST(ShardStepBackFaultTest, OneShardRestoredBehindTheOtherStepsTheJobBack) {
  TwoShardJob job;
  job.StartWorkers();
  ASSERT_TRUE(job.WaitForCheckpoint(1, 20));
  ASSERT_TRUE(job.WaitForVersion(0, 24));
  job.KillShard(1);  // It restores 20; shard 0 is at 24 or 25.
  job.RestartShard(1);
  const std::vector<float>& want = TwoShardReference();
  ASSERT_FALSE(want.empty());
  EXPECT_EQ(job.FinalWeights(), want);
  EXPECT_THAT(job.worker_logs_,
              HasSubstr("stepping the shards back to version 20, the newest "
                        "they all hold"));
  EXPECT_THAT(job.shard_logs_, HasSubstr("stepped back to version 20 from"));
}

// Failed once under load (2 busy cores) before Checkpointer::StepBack
// answered a stale request ABORTED: the worker's registration had met the
// old shard 1 (at 33, holding 30) just before it was killed, and the
// restarted one (holding 10 and 20) refused the step back to 30 as a
// missing checkpoint, which ends a worker.
TEST(ShardStepBackFaultTest, BothShardsRestartedFromDifferentVersions) {
  TwoShardJob job;
  job.StartWorkers();
  ASSERT_TRUE(job.WaitForCheckpoint(0, 30));
  ASSERT_TRUE(job.WaitForCheckpoint(1, 30));
  ASSERT_TRUE(job.WaitForVersion(0, 32));
  job.KillShard(0);
  job.KillShard(1);
  // Shard 1 died before it wrote 30: it restores 20, shard 0 restores 30.
  ASSERT_EQ(::unlink(job.Checkpoint(1, 30).c_str()), 0);
  job.RestartShard(0);
  job.RestartShard(1);
  const std::vector<float>& want = TwoShardReference();
  ASSERT_FALSE(want.empty());
  EXPECT_EQ(job.FinalWeights(), want);
  EXPECT_THAT(job.shard_logs_, HasSubstr("restored version 30"));
  EXPECT_THAT(job.shard_logs_, HasSubstr("restored version 20"));
  EXPECT_THAT(job.shard_logs_, HasSubstr("stepped back to version 20 from 30"));
  EXPECT_THAT(job.shard_logs_, HasSubstr(".stepped-back: the job computes"));
}

}  // namespace
}  // namespace lockstep
