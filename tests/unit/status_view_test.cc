#include "server/ctl/status_view.h"

#include <string>
#include <vector>

#include "common/model/signature_proto.h"
#include "gmock/gmock.h"
#include "gtest/gtest.h"
#include "server/ctl/shard_client.h"

namespace lockstep {
namespace {

using ::testing::HasSubstr;
using ::testing::Not;

const absl::Time kNow = absl::FromUnixSeconds(1718000000);

ShardStatus Shard(int shard, int64_t version) {
  ShardStatus s;
  s.shard = shard;
  s.num_shards = 2;
  s.version = version;
  s.num_workers = 3;
  s.num_chunks = 2;
  s.server_time = kNow;
  s.registered_ranks = {0, 1, 2};
  for (int r = 0; r < 3; ++r) {
    ShardStatus::Worker w;
    w.rank = r;
    w.last_contact = kNow - absl::Milliseconds(100 * (r + 1));
    w.last_step = version;
    w.last_step_seconds = 0.0125;
    s.workers.push_back(w);
  }
  s.model = "101770 parameters in 4 tensors, adam, sync, total 100 steps";
  s.pushes_accepted = 240;
  s.bytes_received = 3 << 20;
  s.bytes_sent = 1536;
  return s;
}

TEST(StatusViewTest, ShowsWhoPushedAndWhoIsAwaited) {
  ShardStatus a = Shard(0, 12);
  a.pushed_ranks = {0, 2};
  a.workers[1].last_step = 11;
  a.pushes_refused = 2;
  a.pushes_refused_by_code = {{"FAILED_PRECONDITION", 2}};
  ShardStatus b = Shard(1, 12);
  b.pushed_ranks = {0};  // Rank 2's push has not reached shard 1 yet.
  b.workers[0].last_contact = kNow - absl::Seconds(75);
  std::vector<ShardReading> readings = {
      {"ps0:2222", a, HealthStatus::kServing},
      {"ps1:2222", b, HealthStatus::kServing}};
  EXPECT_EQ(
      RenderJobStatus(readings),
      "Lockstep job: version 12 (step 12), 3 workers, 2 shards  "
      "[2024-06-10 06:13:20 UTC]\n"
      "Model: 101770 parameters in 4 tensors, adam, sync, total 100 steps\n"
      "Step 12: pushed by 1 of 3 (0); awaiting 1,2\n"
      "\n"
      "RANK  STATE     STEP 12  LAST CONTACT  STEP TIME  LAST STEP\n"
      "0     training  pushed   0.1s ago      12.5 ms    12\n"
      "1     training  awaited  0.2s ago      12.5 ms    12\n"
      "2     training  awaited  0.3s ago      12.5 ms    12\n"
      "\n"
      "SHARD  ADDRESS   HEALTH   VERSION  PUSHES  REFUSED  DROPPED  IN       "
      "OUT\n"
      "0      ps0:2222  SERVING  12       240     2        0        3.0 MiB  "
      "1.5 KiB\n"
      "1      ps1:2222  SERVING  12       240     0        0        3.0 MiB  "
      "1.5 KiB\n"
      "Refused pushes: FAILED_PRECONDITION 2\n");
}

TEST(StatusViewTest, AShardAheadHasEveryPushOfTheStep) {
  ShardStatus a = Shard(0, 12);
  a.pushed_ranks = {1};
  ShardStatus b = Shard(1, 13);  // Closed step 12 already.
  std::vector<ShardReading> readings = {{"a:1", a, HealthStatus::kServing},
                                        {"b:1", b, HealthStatus::kServing}};
  EXPECT_THAT(RenderJobStatus(readings),
              HasSubstr("Step 12: pushed by 1 of 3 (1); awaiting 0,2\n"));
}

// A shard that owns no chunk (too few values for the shards) holds no
// version: the job's is the others' (before, its -1 read as "no weights
// yet, waiting for version 0").
TEST(StatusViewTest, AShardThatOwnsNoChunkHoldsNoVersion) {
  ShardStatus a = Shard(0, 12);
  a.pushed_ranks = {0, 1, 2};
  ShardStatus b = Shard(1, -1);
  b.num_chunks = 0;
  b.pushes_accepted = 0;
  std::vector<ShardReading> readings = {{"a:1", a, HealthStatus::kServing},
                                        {"b:1", b, HealthStatus::kServing}};
  const std::string text = RenderJobStatus(readings);
  EXPECT_THAT(text, HasSubstr("Lockstep job: version 12 (step 12)"));
  EXPECT_THAT(text, HasSubstr("Step 12: pushed by 3 of 3"));
  EXPECT_THAT(text, HasSubstr("1      b:1      SERVING  none     0  "));
  EXPECT_THAT(text, HasSubstr("Shard(s) 1 own no chunk of the model"));
  EXPECT_THAT(text, Not(HasSubstr("no weights yet")));
}

TEST(StatusViewTest, StatesOfWorkers) {
  ShardStatus s = Shard(0, 5);
  s.num_shards = 1;
  s.registered_ranks = {1, 2};
  s.finished_ranks = {2};
  s.workers[0].last_contact = kNow - absl::Seconds(3725);  // Evicted.
  s.workers[1].last_step = -1;
  s.workers[1].last_step_seconds = 0;
  std::vector<ShardReading> readings = {{"a:1", s, HealthStatus::kNotServing}};
  const std::string text = RenderJobStatus(readings);
  EXPECT_THAT(text, HasSubstr("0     away      awaited  1h02m ago"));
  EXPECT_THAT(text, HasSubstr("1     joined    awaited  0.2s ago      -  "));
  EXPECT_THAT(text, HasSubstr("2     finished  left"));
  EXPECT_THAT(text, HasSubstr("NOT_SERVING"));
  s.finished_ranks = {0, 1, 2};
  readings = {{"a:1", s, HealthStatus::kServing}};
  EXPECT_TRUE(JobFinished(readings));
  EXPECT_THAT(RenderJobStatus(readings),
              HasSubstr("Every worker has left: the job is done\n"));
}

// An all-reduce job's server registers no model and sees no pushes: its
// ranks' reports (Coordinator.ReportSteps) are their last steps. It said
// "Waiting for version 0" and every rank "away" before.
TEST(StatusViewTest, AnAllReduceJobIsShownByItsRanksReports) {
  ShardStatus s = Shard(0, -1);
  s.num_shards = 1;
  s.model.clear();
  s.registered_ranks.clear();
  for (ShardStatus::Worker& w : s.workers) w.last_step = 75;
  s.workers[2].last_step = -1;  // Not reported yet.
  s.workers[2].last_step_seconds = 0;
  std::vector<ShardReading> readings = {{"a:1", s, HealthStatus::kServing}};
  const std::string text = RenderJobStatus(readings);
  EXPECT_THAT(text, HasSubstr("Lockstep job: all-reduce among the workers, "
                              "3 workers, 1 shard  ["));
  EXPECT_THAT(text, HasSubstr("The ranks train among themselves; their "
                              "steps as they report them:\n"));
  EXPECT_THAT(text, HasSubstr("0     training  -     0.1s ago      12.5 ms  "
                              "  75"));
  EXPECT_THAT(text, HasSubstr("2     joined    -     0.3s ago      -  "));
  EXPECT_THAT(text, Not(HasSubstr("Waiting for version 0")));
}

TEST(StatusViewTest, UnreachableShardsAreNamed) {
  std::vector<ShardReading> readings = {
      {"a:1", absl::UnavailableError("GetStatus on a:1: UNAVAILABLE: down"),
       absl::UnavailableError("down")}};
  EXPECT_EQ(RenderJobStatus(readings),
            "Lockstep job: no server shard answered\n"
            "  GetStatus on a:1: UNAVAILABLE: down\n");
  EXPECT_FALSE(JobFinished(readings));
  readings.push_back({"b:1", Shard(1, -1), HealthStatus::kNotServing});
  const std::string text = RenderJobStatus(readings);
  EXPECT_THAT(text, HasSubstr("Lockstep job: no weights yet, 3 workers"));
  EXPECT_THAT(text, HasSubstr("Waiting for version 0"));
  EXPECT_THAT(text, HasSubstr("0      a:1      ?            ?"));
  EXPECT_THAT(text, HasSubstr("error: GetStatus on a:1: UNAVAILABLE: down\n"));
}

TEST(StatusViewTest, FormatsAgesAndBytes) {
  EXPECT_EQ(FormatAge(absl::InfinitePast(), kNow), "never");
  EXPECT_EQ(FormatAge(kNow + absl::Seconds(1), kNow), "0.0s ago");
  EXPECT_EQ(FormatAge(kNow - absl::Milliseconds(2345), kNow), "2.3s ago");
  EXPECT_EQ(FormatAge(kNow - absl::Seconds(42), kNow), "42s ago");
  EXPECT_EQ(FormatAge(kNow - absl::Seconds(245), kNow), "4m05s ago");
  EXPECT_EQ(FormatBytes(812), "812 B");
  EXPECT_EQ(FormatBytes(1536), "1.5 KiB");
  EXPECT_EQ(FormatBytes(int64_t{3} << 30), "3.0 GiB");
}

// The Model line names a LocalSGD or DiLoCo job's rounds and both
// optimizers; a synchronous job's line is as it was.
TEST(DescribeModelTest, RoundsNameTheOuterAndInnerOptimizers) {
  ModelSignature signature;
  signature.tensors = {{"w", {784, 128}}, {"b", {128}}};
  signature.optimizer = OptimizerConfig::Defaults("adam");
  signature.total_steps = 2340;
  v1::ModelSignature proto;
  SignatureToProto(signature, &proto);
  EXPECT_EQ(DescribeModel(proto),
            "100480 parameters in 2 tensors, adam, sync, total 2340 steps");
  signature.inner_optimizer = signature.optimizer;
  signature.optimizer = OptimizerConfig::Defaults("momentum");
  signature.optimizer.nesterov = true;
  signature.sync.local_steps = 10;
  signature.total_steps = 234;
  SignatureToProto(signature, &proto);
  EXPECT_EQ(DescribeModel(proto),
            "100480 parameters in 2 tensors, momentum on rounds of 10 local "
            "steps of adam, total 234 rounds");
}

}  // namespace
}  // namespace lockstep
