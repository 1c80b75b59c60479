#include "server/daemon/server_telemetry.h"

#include <unistd.h>

#include <fstream>
#include <map>
#include <sstream>
#include <string>
#include <vector>

#include "absl/strings/str_cat.h"
#include "common/formats/json_value.h"
#include "gmock/gmock.h"
#include "gtest/gtest.h"
#include "server/core/parameter_server.h"
#include "tests/integration/prometheus_text.h"
#include "tests/unit/chunk_reply_test_util.h"

namespace lockstep {
namespace {

ModelSignature Signature() {
  ModelSignature s;
  s.tensors = {{"w", {3}}};
  s.optimizer = OptimizerConfig::Defaults("sgd");
  s.chunk_bytes = 1 << 20;
  s.num_workers = 2;
  return s;
}

// A 2-worker job on one in-process shard that reports to a ServerTelemetry
// writing a trace.
class ServerTelemetryTest : public ::testing::Test {
 protected:
  void SetUp() override {
    trace_path_ = absl::StrCat(
        std::getenv("TEST_TMPDIR") != nullptr ? std::getenv("TEST_TMPDIR")
                                              : "/tmp",
        "/lockstep_server_telemetry_", getpid(), ".json");
    ServerTelemetryOptions options;
    options.trace_path = trace_path_;
    options.checkpoints = true;
    auto telemetry = ServerTelemetry::Create(options);
    ASSERT_TRUE(telemetry.ok()) << telemetry.status();
    telemetry_ = std::move(*telemetry);
    ASSERT_NE(telemetry_->observer(), nullptr);
    ParameterServerOptions core;
    core.num_workers = 2;
    core.observer = telemetry_->observer();
    auto ps = ParameterServer::Create(core);
    ASSERT_TRUE(ps.ok());
    ps_ = std::move(*ps);
    telemetry_->AttachCore(ps_.get(), 2);
    inc_[0] = ps_->Register(0, Signature())->incarnation;
    inc_[1] = ps_->Register(1, Signature())->incarnation;
    ASSERT_TRUE(ps_->Initialize(0, inc_[0], 0, Bytes({1, 2, 3})).ok());
  }
  void TearDown() override { unlink(trace_path_.c_str()); }

  // Both ranks push `step`; returns the replies' status.
  void Step(int64_t step) {
    for (int r = 0; r < 2; ++r) {
      ps_->Push(r, inc_[r], step, 0, WireDType::kFloat32, Bytes({1, 1, 1}),
                [](absl::StatusOr<ChunkSnapshot> s) { EXPECT_TRUE(s.ok()); });
    }
  }

  std::map<std::string, double> Scrape() {
    absl::StatusOr<PrometheusSamples> samples =
        ParsePrometheusText(telemetry_->registry().Render());
    EXPECT_TRUE(samples.ok()) << samples.status();
    return samples.ok() ? *samples : PrometheusSamples();
  }

  std::string trace_path_;
  std::unique_ptr<ServerTelemetry> telemetry_;
  std::unique_ptr<ParameterServer> ps_;
  int64_t inc_[2] = {0, 0};
};

TEST_F(ServerTelemetryTest, CountsStepsWaitsBytesAndRefusals) {
  Step(0);
  Step(1);
  // A push for a step that is not being gathered, and one with NaN.
  ps_->Push(0, inc_[0], 7, 0, WireDType::kFloat32, Bytes({1, 1, 1}),
            [](absl::StatusOr<ChunkSnapshot>) {});
  ps_->Push(0, inc_[0], 2, 0, WireDType::kFloat32, Bytes({NAN, 1, 1}),
            [](absl::StatusOr<ChunkSnapshot>) {});
  telemetry_->CheckpointSaved(2, absl::Now() - absl::Seconds(30));
  std::map<std::string, double> m = Scrape();
  EXPECT_EQ(m["lockstep_server_version"], 2);
  EXPECT_EQ(m["lockstep_server_chunk_steps_total"], 2);
  EXPECT_EQ(m["lockstep_server_pushes_accepted_total"], 4);
  EXPECT_EQ(m["lockstep_server_received_bytes_total"], 4 * 12);
  EXPECT_EQ(
      m["lockstep_server_pushes_refused_total{code=\"FAILED_PRECONDITION\"}"],
      1);
  EXPECT_EQ(
      m["lockstep_server_pushes_refused_total{code=\"INVALID_ARGUMENT\"}"], 1);
  EXPECT_EQ(m["lockstep_server_barrier_wait_seconds_count{rank=\"0\"}"], 2);
  EXPECT_EQ(m["lockstep_server_barrier_wait_seconds_count{rank=\"1\"}"], 2);
  // Rank 0 always came first, so it waited at least as long as rank 1.
  EXPECT_GE(m["lockstep_server_barrier_wait_seconds_sum{rank=\"0\"}"],
            m["lockstep_server_barrier_wait_seconds_sum{rank=\"1\"}"]);
  // The first update after version 0 has no previous version to time from.
  EXPECT_EQ(m["lockstep_server_step_seconds_count"], 1);
  EXPECT_EQ(m["lockstep_server_apply_seconds_count"], 2);
  EXPECT_EQ(m["lockstep_server_workers{state=\"registered\"}"], 2);
  EXPECT_EQ(m["lockstep_server_checkpoint_version"], 2);
  EXPECT_GE(m["lockstep_server_checkpoint_age_seconds"], 30);
  ASSERT_TRUE(m.count("lockstep_server_worker_step_seconds{rank=\"1\"}"));
  EXPECT_GT(m.at("lockstep_server_worker_step_seconds{rank=\"1\"}"), 0);

  const ServerStatus status = ps_->GetStatus();
  ASSERT_EQ(status.workers.size(), 2u);
  // Refused pushes count too: step 7, then step 2, which the log takes
  // as the rank's steps going back (its window starts again).
  EXPECT_EQ(status.workers[0].last_step, 2);
  EXPECT_EQ(status.workers[1].last_step, 1);
  EXPECT_GT(status.workers[1].last_step_time, absl::ZeroDuration());
  EXPECT_LE(status.workers[1].last_contact, status.now);
}

// The workers' reports of their steps become per-rank phase gauges.
TEST_F(ServerTelemetryTest, ExportsEachRanksReportedPhases) {
  Step(0);
  for (int r = 0; r < 2; ++r) {
    ps_->Push(r, inc_[r], 1, 0, WireDType::kFloat32, Bytes({1, 1, 1}),
              [](absl::StatusOr<ChunkSnapshot> s) { EXPECT_TRUE(s.ok()); },
              PushSlot(0, 0, StepReport{0, 1000, 2000 + 1000 * r, 300, 4000}));
  }
  std::map<std::string, double> m = Scrape();
  const std::string gauge = "lockstep_server_worker_phase_seconds";
  EXPECT_DOUBLE_EQ(m[gauge + "{rank=\"1\",phase=\"compute\"}"], 0.003);
  EXPECT_DOUBLE_EQ(m[gauge + "{rank=\"0\",phase=\"compute\"}"], 0.002);
  EXPECT_DOUBLE_EQ(m[gauge + "{rank=\"0\",phase=\"input\"}"], 0.001);
  EXPECT_DOUBLE_EQ(m[gauge + "{rank=\"0\",phase=\"push\"}"], 0.0003);
  EXPECT_DOUBLE_EQ(m[gauge + "{rank=\"0\",phase=\"wait\"}"], 0.004);
}

TEST_F(ServerTelemetryTest, TracesAccumulateGatherAndApplyPerChunk) {
  Step(0);
  ASSERT_TRUE(telemetry_->FlushTrace().ok());
  std::ifstream in(trace_path_);
  std::stringstream text;
  text << in.rdbuf();
  absl::StatusOr<JsonValue> doc = JsonValue::Parse(text.str());
  ASSERT_TRUE(doc.ok()) << doc.status() << text.str();
  std::map<std::string, int> names;
  std::map<int, double> late_track_of_rank;
  for (const JsonValue& e : doc->Find("traceEvents")->array()) {
    if (e.Find("ph")->string() != "X") continue;
    ++names[e.Find("name")->string()];
    EXPECT_EQ(e.Find("args")->Find("step")->number(), 0);
    if (e.Find("name")->string() == "late") {
      // Each rank's lateness on a track of its own, past the chunks'.
      const int rank = static_cast<int>(e.Find("args")->Find("rank")->number());
      late_track_of_rank[rank] = e.Find("tid")->number();
      continue;
    }
    EXPECT_EQ(e.Find("tid")->number(), 1);  // Chunk 0's track.
  }
  EXPECT_EQ(names,
            (std::map<std::string, int>{
                {"accumulate", 2}, {"apply", 1}, {"gather", 1}, {"late", 2}}));
  ASSERT_EQ(late_track_of_rank.size(), 2u);
  EXPECT_EQ(late_track_of_rank[1] - late_track_of_rank[0], 1);
  EXPECT_GT(late_track_of_rank[0], 1);
}

TEST(ServerTelemetryOffTest, NoObserverWithoutMetricsOrTrace) {
  auto telemetry = ServerTelemetry::Create(ServerTelemetryOptions());
  ASSERT_TRUE(telemetry.ok());
  EXPECT_EQ((*telemetry)->observer(), nullptr);
  EXPECT_EQ((*telemetry)->metrics_port(), 0);
}

}  // namespace
}  // namespace lockstep
