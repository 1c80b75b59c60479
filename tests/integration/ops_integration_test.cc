// Operations through real processes on loopback: grpc.health.v1 on servers
// and workers, and Prometheus metrics (lockstep_ctl and trace files are in
// ops_ctl_integration_test.cc).
#include <grpcpp/grpcpp.h>
#include <signal.h>
#include <unistd.h>

#include <algorithm>
#include <cstdlib>
#include <map>
#include <memory>
#include <set>
#include <string>
#include <vector>

#include "absl/strings/ascii.h"
#include "absl/strings/match.h"
#include "absl/strings/str_cat.h"
#include "absl/time/clock.h"
#include "common/formats/json_value.h"
#include "common/ops/health_client.h"
#include "gmock/gmock.h"
#include "gtest/gtest.h"
#include "server/ctl/shard_client.h"
#include "tests/integration/ops_test_util.h"
#include "tests/integration/prometheus_text.h"
#include "tests/integration/subprocess.h"

namespace lockstep {
namespace {

using ::testing::HasSubstr;
using ::testing::Not;

TEST(OpsIntegrationTest, HealthFollowsLoadingTrainingAndDraining) {
  const std::string dir = MakeTempDir();
  const int port = FreePort();
  const int worker_health = FreePort();
  // The server's --health_port: the main port's status, for probes that
  // cannot speak TLS.
  const int server_health = FreePort();
  const std::vector<std::string> server_flags = {
      "--workers=1", "--checkpoint_dir=" + dir + "/ckpt",
      absl::StrCat("--health_port=", server_health),
      // The drain's checkpoint and the restart's load take long enough to be
      // seen (the load: three fresh connections and calls, on a busy box).
      "--testing_checkpoint_pause_ms=1500", "--testing_restore_pause_ms=5000"};
  Server first = StartServer(dir, port, server_flags);
  ASSERT_EQ(first.port, port) << first.process->Output();
  EXPECT_TRUE(WaitUntil([&]() { return HealthIs(port, HealthStatus::kServing); }));
  EXPECT_TRUE(WaitUntil(
      [&]() { return HealthIs(server_health, HealthStatus::kServing); }));

  std::unique_ptr<Subprocess> worker = StartWorker(
      first, 1, 0,
      {"--max_steps=150", "--straggle=0:20",
       absl::StrCat("--health_port=", worker_health)});
  EXPECT_TRUE(WaitUntil(
      [&]() { return HealthIs(worker_health, HealthStatus::kServing); }))
      << worker->Output();
  ASSERT_TRUE(WaitUntil([&]() { return Version(first) >= 5; }))
      << first.process->Output();

  // SIGTERM: the server drains, writes a checkpoint (slowly) and exits.
  kill(first.process->pid(), SIGTERM);
  EXPECT_TRUE(WaitUntil(
      [&]() { return HealthIs(port, HealthStatus::kNotServing); }))
      << first.process->Output();
  EXPECT_TRUE(WaitUntil(
      [&]() { return HealthIs(server_health, HealthStatus::kNotServing); }));
  EXPECT_EQ(first.process->Wait(kDeadline), 0) << first.process->Output();
  EXPECT_FALSE(Health(port).ok());
  EXPECT_FALSE(Health(server_health).ok());

  // The restarted server listens while it restores: NOT_SERVING, GetStatus
  // answers (no version yet), the worker's registration waits; then
  // SERVING and the job goes on from the checkpoint.
  Server second = StartServer(dir, port, server_flags);
  ASSERT_EQ(second.port, port) << second.process->Output();
  EXPECT_TRUE(HealthIs(port, HealthStatus::kNotServing));
  EXPECT_TRUE(HealthIs(server_health, HealthStatus::kNotServing));
  EXPECT_EQ(Version(second), -1);
  EXPECT_TRUE(WaitUntil([&]() { return HealthIs(port, HealthStatus::kServing); }));
  EXPECT_TRUE(WaitUntil(
      [&]() { return HealthIs(server_health, HealthStatus::kServing); }));
  EXPECT_GE(Version(second), 5);
  EXPECT_TRUE(HealthIs(worker_health, HealthStatus::kServing));

  EXPECT_EQ(worker->Wait(kDeadline), 0) << worker->Output();
  EXPECT_FALSE(Health(worker_health).ok()) << "health outlived the worker";
  EXPECT_EQ(second.process->Wait(kDeadline), 0) << second.process->Output();
  EXPECT_THAT(second.process->Output(), HasSubstr("restored version"));
}

// The series of `family` in `samples` (name or name{...}).
double Value(const PrometheusSamples& samples, const std::string& series) {
  auto it = samples.find(series);
  return it == samples.end() ? -1 : it->second;
}

PrometheusSamples ScrapeSamples(int port) {
  absl::StatusOr<PrometheusSamples> samples = ParsePrometheusText(Scrape(port));
  EXPECT_TRUE(samples.ok()) << samples.status();
  return samples.ok() ? *samples : PrometheusSamples();
}

// Every server family the dashboards read has its TYPE and HELP lines.
void ExpectServerFamiliesDescribed(int port) {
  const std::string text = Scrape(port);
  for (const char* family :
       {"lockstep_server_step_seconds", "lockstep_server_barrier_wait_seconds",
        "lockstep_server_received_bytes_total",
        "lockstep_server_sent_bytes_total", "lockstep_server_version",
        "lockstep_server_pushes_dropped_late_total",
        "lockstep_server_checkpoint_age_seconds"}) {
    EXPECT_THAT(text, HasSubstr(absl::StrCat("# TYPE ", family, " ")));
    EXPECT_THAT(text, HasSubstr(absl::StrCat("# HELP ", family, " ")));
  }
}

TEST(OpsIntegrationTest, MetricsAreWellFormedAndMove) {
  const std::string dir = MakeTempDir();
  const int server_metrics = FreePort();
  const int worker_metrics[2] = {FreePort(), FreePort()};
  Server server = StartServer(
      dir, 0,
      {"--workers=2", absl::StrCat("--metrics_port=", server_metrics),
       "--checkpoint_dir=" + dir + "/ckpt"});
  ASSERT_GT(server.port, 0) << server.process->Output();
  std::unique_ptr<Subprocess> workers[2];
  for (int r = 0; r < 2; ++r) {
    workers[r] =
        StartWorker(server, 2, r,
                    // Longer than the checks below on any box: stopped once
                    // they are done.
                    {"--max_steps=500", "--straggle=1:15",
                     absl::StrCat("--metrics_port=", worker_metrics[r])});
  }
  ASSERT_TRUE(WaitUntil([&]() { return Version(server) >= 5; }))
      << server.process->Output() << workers[0]->Output();

  const PrometheusSamples s1 = ScrapeSamples(server_metrics);
  const PrometheusSamples w1 = ScrapeSamples(worker_metrics[1]);
  ExpectServerFamiliesDescribed(server_metrics);
  for (const char* phase : {"pull", "compute", "push", "wait"}) {
    EXPECT_GT(Value(w1, absl::StrCat("lockstep_worker_phase_seconds_count{"
                                     "phase=\"",
                                     phase, "\"}")),
              0);
  }
  const int64_t seen = static_cast<int64_t>(Value(s1, "lockstep_server_version"));
  ASSERT_TRUE(WaitUntil([&]() { return Version(server) >= seen + 5; }));
  const PrometheusSamples s2 = ScrapeSamples(server_metrics);
  const PrometheusSamples w2 = ScrapeSamples(worker_metrics[1]);
  for (const char* series :
       {"lockstep_server_version", "lockstep_server_pushes_accepted_total",
        "lockstep_server_received_bytes_total",
        "lockstep_server_sent_bytes_total",
        "lockstep_server_step_seconds_count",
        "lockstep_server_barrier_wait_seconds_count{rank=\"0\"}",
        "lockstep_server_barrier_wait_seconds_count{rank=\"1\"}"}) {
    EXPECT_GT(Value(s2, series), Value(s1, series)) << series;
  }
  // Rank 1 straggles: rank 0 waits for it at the barrier, not the reverse.
  EXPECT_GT(Value(s2, "lockstep_server_barrier_wait_seconds_sum{rank=\"0\"}"),
            Value(s2, "lockstep_server_barrier_wait_seconds_sum{rank=\"1\"}"));
  for (const char* series :
       {"lockstep_worker_steps_total", "lockstep_worker_examples_total",
        "lockstep_worker_version", "lockstep_worker_step_seconds_count"}) {
    EXPECT_GT(Value(w2, series), Value(w1, series)) << series;
  }
  EXPECT_EQ(Value(w2, "lockstep_worker_training"), 1);
  // The progress line's running figures: a cross-entropy and a fraction.
  EXPECT_GT(Value(w2, "lockstep_worker_loss"), 0);
  EXPECT_GE(Value(w2, "lockstep_worker_accuracy"), 0);  // -1: missing.
  EXPECT_LE(Value(w2, "lockstep_worker_accuracy"), 1);
  EXPECT_EQ(Value(s2, "lockstep_server_serving"), 1);
  StopWorkers(workers);
  EXPECT_EQ(server.process->Wait(kDeadline), 0) << "both left";
}

}  // namespace
}  // namespace lockstep
