// Operations through real processes on loopback: grpc.health.v1 on servers
// and workers, Prometheus metrics, lockstep_ctl and trace files.
#include <arpa/inet.h>
#include <grpcpp/grpcpp.h>
#include <netinet/in.h>
#include <signal.h>
#include <sys/socket.h>
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
#include "common/health_client.h"
#include "common/json_value.h"
#include "gmock/gmock.h"
#include "gtest/gtest.h"
#include "server/ctl/shard_client.h"
#include "tests/integration/prometheus_text.h"
#include "tests/integration/subprocess.h"

namespace lockstep {
namespace {

using ::testing::HasSubstr;
using ::testing::Not;

const std::string kBin = LOCKSTEP_BIN_DIR;
constexpr absl::Duration kDeadline = absl::Seconds(60);

// Polls `ready` until it holds or `timeout` passes.
template <typename Ready>
bool WaitUntil(Ready ready, absl::Duration timeout = kDeadline) {
  const absl::Time deadline = absl::Now() + timeout;
  while (absl::Now() < deadline) {
    if (ready()) return true;
    absl::SleepFor(absl::Milliseconds(20));
  }
  return ready();
}

// The body of GET http://127.0.0.1:port/metrics; empty when unreachable or
// not 200.
std::string Scrape(int port) {
  const int fd = socket(AF_INET, SOCK_STREAM, 0);
  sockaddr_in addr{};
  addr.sin_family = AF_INET;
  addr.sin_port = htons(static_cast<uint16_t>(port));
  addr.sin_addr.s_addr = htonl(INADDR_LOOPBACK);
  std::string response;
  if (connect(fd, reinterpret_cast<sockaddr*>(&addr), sizeof(addr)) == 0) {
    const std::string request =
        "GET /metrics HTTP/1.1\r\nHost: 127.0.0.1\r\n\r\n";
    (void)!send(fd, request.data(), request.size(), MSG_NOSIGNAL);
    char buffer[8192];
    ssize_t n;
    while ((n = recv(fd, buffer, sizeof(buffer), 0)) > 0) {
      response.append(buffer, static_cast<size_t>(n));
    }
  }
  close(fd);
  if (!absl::StartsWith(response, "HTTP/1.1 200 OK\r\n")) return "";
  return response.substr(response.find("\r\n\r\n") + 4);
}

absl::StatusOr<HealthStatus> Health(int port) {
  return CheckHealth(
      grpc::CreateChannel(absl::StrCat("127.0.0.1:", port),
                          grpc::InsecureChannelCredentials()),
      "", absl::Seconds(2));
}

bool HealthIs(int port, HealthStatus want) {
  absl::StatusOr<HealthStatus> h = Health(port);
  return h.ok() && *h == want;
}

// A lockstep_server on 127.0.0.1:port (0: a free one), started with
// --port_file and waited for.
struct Server {
  std::unique_ptr<Subprocess> process;
  int port = 0;
  std::string address;
};

Server StartServer(const std::string& dir, int port,
                   const std::vector<std::string>& flags) {
  static int starts = 0;
  const std::string port_file = absl::StrCat(dir, "/port", ++starts);
  // Test hooks live in their own binary; everything else runs the real one.
  const bool hooks = std::any_of(flags.begin(), flags.end(), [](auto& f) {
    return absl::StartsWith(f, "--testing_");
  });
  std::vector<std::string> argv = {
      kBin + (hooks ? "/lockstep_server_testing" : "/lockstep_server"),
      absl::StrCat("--listen=127.0.0.1:", port), "--port_file=" + port_file};
  argv.insert(argv.end(), flags.begin(), flags.end());
  Server s;
  s.process = std::make_unique<Subprocess>(Subprocess::Start(argv));
  WaitUntil([&]() {
    return !ReadFile(port_file).empty() ||
           s.process->Wait(absl::ZeroDuration()).has_value();
  });
  s.port = std::atoi(
      std::string(absl::StripAsciiWhitespace(ReadFile(port_file))).c_str());
  s.address = absl::StrCat("127.0.0.1:", s.port);
  return s;
}

std::unique_ptr<Subprocess> StartWorker(const Server& server, int workers,
                                        int rank,
                                        const std::vector<std::string>& flags) {
  std::vector<std::string> argv = {
      kBin + "/lockstep_worker",   "--servers=" + server.address,
      absl::StrCat("--workers=", workers), absl::StrCat("--rank=", rank),
      "--dataset=synthetic",       "--synthetic_examples=64000",
      "--epochs=1",                "--progress=none",
      // StopWorkers stops both at once: one may already wait at the next
      // step's barrier for the other, which left. Until stop signals cancel
      // waiting calls (issue 24), its own step deadline ends that wait.
      "--step_timeout_s=20"};
  argv.insert(argv.end(), flags.begin(), flags.end());
  return std::make_unique<Subprocess>(Subprocess::Start(argv));
}

// Stops still-running workers as a pod's SIGTERM would: each leaves the
// job after its step (exit 143), which ends a job of --exit_when_done.
void StopWorkers(std::unique_ptr<Subprocess> (&workers)[2]) {
  for (auto& w : workers) kill(w->pid(), SIGTERM);
  for (auto& w : workers) {
    EXPECT_EQ(w->Wait(kDeadline), 143) << w->Output();
    EXPECT_THAT(w->Output(), HasSubstr("Left the job")) << "still training";
  }
}

int64_t Version(const Server& server) {
  absl::StatusOr<std::unique_ptr<ShardClient>> client =
      ShardClient::Create(server.address, TlsOptions());
  if (!client.ok()) return -2;
  absl::StatusOr<ShardStatus> status = (*client)->GetStatus(absl::Seconds(2));
  return status.ok() ? status->version : -2;
}

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

  auto scrape = [](int port) {
    absl::StatusOr<PrometheusSamples> samples = ParsePrometheusText(Scrape(port));
    EXPECT_TRUE(samples.ok()) << samples.status();
    return samples.ok() ? *samples : PrometheusSamples();
  };
  const PrometheusSamples s1 = scrape(server_metrics);
  const PrometheusSamples w1 = scrape(worker_metrics[1]);
  const std::string text = Scrape(server_metrics);
  for (const char* family :
       {"lockstep_server_step_seconds", "lockstep_server_barrier_wait_seconds",
        "lockstep_server_received_bytes_total",
        "lockstep_server_sent_bytes_total", "lockstep_server_version",
        "lockstep_server_pushes_dropped_late_total",
        "lockstep_server_checkpoint_age_seconds"}) {
    EXPECT_THAT(text, HasSubstr(absl::StrCat("# TYPE ", family, " ")));
    EXPECT_THAT(text, HasSubstr(absl::StrCat("# HELP ", family, " ")));
  }
  for (const char* phase : {"pull", "compute", "push", "wait"}) {
    EXPECT_GT(Value(w1, absl::StrCat("lockstep_worker_phase_seconds_count{"
                                     "phase=\"",
                                     phase, "\"}")),
              0);
  }
  const int64_t seen = static_cast<int64_t>(Value(s1, "lockstep_server_version"));
  ASSERT_TRUE(WaitUntil([&]() { return Version(server) >= seen + 5; }));
  const PrometheusSamples s2 = scrape(server_metrics);
  const PrometheusSamples w2 = scrape(worker_metrics[1]);
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
  EXPECT_EQ(Value(s2, "lockstep_server_serving"), 1);
  StopWorkers(workers);
  EXPECT_EQ(server.process->Wait(kDeadline), 0) << "both left";
}

TEST(OpsIntegrationTest, CtlShowsALiveJobAndTakesCheckpoints) {
  const std::string dir = MakeTempDir();
  Server server =
      StartServer(dir, 0, {"--workers=2", "--checkpoint_dir=" + dir + "/ckpt"});
  ASSERT_GT(server.port, 0) << server.process->Output();
  std::unique_ptr<Subprocess> workers[2];
  for (int r = 0; r < 2; ++r) {
    // Rank 1 takes 150 ms a step, so a view almost always finds rank 0
    // pushed and rank 1 awaited. Stopped once the checks are done.
    workers[r] =
        StartWorker(server, 2, r, {"--max_steps=500", "--straggle=1:150"});
  }
  ASSERT_TRUE(WaitUntil([&]() { return Version(server) >= 2; }));
  const std::string ctl = kBin + "/lockstep_ctl";

  // A view that caught rank 0 at the barrier, waiting for rank 1 (nearly
  // every view does).
  RunResult status;
  EXPECT_TRUE(WaitUntil([&]() {
    status = RunProcess({ctl, "status", server.address});
    return absl::StrContains(status.output, "awaiting 1\n");
  })) << status.output;
  EXPECT_EQ(status.exit_code, 0) << status.output;
  EXPECT_THAT(status.output, HasSubstr("Lockstep job: version "));
  EXPECT_THAT(status.output, HasSubstr("2 workers, 1 shard"));
  EXPECT_THAT(status.output, HasSubstr("RANK  STATE     STEP "));
  EXPECT_THAT(status.output, HasSubstr("0     training  pushed "));
  EXPECT_THAT(status.output, HasSubstr("1     training  awaited"));
  EXPECT_THAT(status.output, HasSubstr("awaiting 1\n"));
  EXPECT_THAT(status.output, HasSubstr(" ms "));  // Step times.
  EXPECT_THAT(status.output, HasSubstr(server.address + "  SERVING"));

  // Not a terminal: plain blocks, no escape sequences, as many as asked.
  RunResult watch = RunProcess(
      {ctl, "status", server.address, "--watch", "--interval=100ms",
       "--count=3"});
  EXPECT_EQ(watch.exit_code, 0) << watch.output;
  size_t blocks = 0;
  for (size_t at = 0; (at = watch.output.find("Lockstep job:", at)) !=
                      std::string::npos;
       ++at) {
    ++blocks;
  }
  EXPECT_EQ(blocks, 3u) << watch.output;
  EXPECT_THAT(watch.output, Not(HasSubstr("\033[")));

  RunResult checkpoint = RunProcess({ctl, "checkpoint", server.address});
  EXPECT_EQ(checkpoint.exit_code, 0) << checkpoint.output;
  EXPECT_THAT(checkpoint.output,
              HasSubstr(server.address + ": checkpoint of version "));
  const size_t in = checkpoint.output.find(" in ");
  ASSERT_NE(in, std::string::npos);
  const std::string path(absl::StripAsciiWhitespace(
      checkpoint.output.substr(in + 4)));
  EXPECT_TRUE(absl::StartsWith(path, dir + "/ckpt")) << path;
  EXPECT_FALSE(ReadFile(path).empty()) << path;

  StopWorkers(workers);
  EXPECT_EQ(server.process->Wait(kDeadline), 0) << "both left";
}

TEST(OpsIntegrationTest, CtlErrorsAreClear) {
  const std::string ctl = kBin + "/lockstep_ctl";
  const std::string nobody = absl::StrCat("127.0.0.1:", FreePort());
  RunResult down = RunProcess({ctl, "status", nobody, "--timeout=2s"});
  EXPECT_EQ(down.exit_code, 1) << down.output;
  EXPECT_THAT(down.output, HasSubstr("GetStatus on " + nobody + ": UNAVAILABLE"));
  RunResult down_checkpoint =
      RunProcess({ctl, "checkpoint", nobody, "--timeout=2s"});
  EXPECT_EQ(down_checkpoint.exit_code, 1);
  EXPECT_THAT(down_checkpoint.output, HasSubstr("UNAVAILABLE"));
  EXPECT_EQ(RunProcess({ctl}).exit_code, 2);
  EXPECT_EQ(RunProcess({ctl, "frobnicate", nobody}).exit_code, 2);
  EXPECT_EQ(RunProcess({ctl, "status"}).exit_code, 2);

  const std::string dir = MakeTempDir();
  Server server = StartServer(dir, 0, {"--workers=1"});
  RunResult no_dir = RunProcess({ctl, "checkpoint", server.address});
  EXPECT_EQ(no_dir.exit_code, 1);
  EXPECT_THAT(no_dir.output, HasSubstr("FAILED_PRECONDITION"));
  EXPECT_THAT(no_dir.output, HasSubstr("--checkpoint_dir"));
  server.process->Kill();
}

// Complete events of a trace file: name -> count; checks their fields.
std::map<std::string, int> CheckTrace(const std::string& path,
                                      absl::Time start, absl::Time end,
                                      std::set<int64_t>* pids) {
  absl::StatusOr<JsonValue> doc = JsonValue::Parse(ReadFile(path));
  EXPECT_TRUE(doc.ok()) << path << ": " << doc.status();
  std::map<std::string, int> names;
  if (!doc.ok()) return names;
  const JsonValue* events = doc->Find("traceEvents");
  EXPECT_NE(events, nullptr);
  if (events == nullptr) return names;
  for (const JsonValue& e : events->array()) {
    pids->insert(static_cast<int64_t>(e.Find("pid")->number()));
    if (e.Find("ph")->string() != "X") continue;
    ++names[e.Find("name")->string()];
    const double ts = e.Find("ts")->number();
    // One clock: realtime microseconds, within the test's run.
    EXPECT_GE(ts, static_cast<double>(absl::ToUnixMicros(start)));
    EXPECT_LE(ts, static_cast<double>(absl::ToUnixMicros(end)));
    EXPECT_GE(e.Find("dur")->number(), 0);
    EXPECT_NE(e.Find("tid"), nullptr);
  }
  return names;
}

TEST(OpsIntegrationTest, TracesOfBothRolesShareOneClockAndMerge) {
  const std::string dir = MakeTempDir();
  const absl::Time start = absl::Now();
  Server server =
      StartServer(dir, 0, {"--workers=2", "--trace=" + dir + "/server.json"});
  ASSERT_GT(server.port, 0) << server.process->Output();
  std::unique_ptr<Subprocess> workers[2];
  for (int r = 0; r < 2; ++r) {
    workers[r] = StartWorker(
        server, 2, r,
        {"--max_steps=15", absl::StrCat("--trace=", dir, "/worker", r, ".json")});
  }
  for (auto& w : workers) ASSERT_EQ(w->Wait(kDeadline), 0) << w->Output();
  ASSERT_EQ(server.process->Wait(kDeadline), 0) << server.process->Output();
  const absl::Time end = absl::Now();

  std::set<int64_t> pids;
  std::map<std::string, int> s =
      CheckTrace(dir + "/server.json", start, end, &pids);
  EXPECT_EQ(s["accumulate"], 2 * 15);
  EXPECT_EQ(s["apply"], 15);
  EXPECT_EQ(s["gather"], 15);
  for (int r = 0; r < 2; ++r) {
    std::map<std::string, int> w = CheckTrace(
        absl::StrCat(dir, "/worker", r, ".json"), start, end, &pids);
    EXPECT_EQ(w["step"], 15);
    EXPECT_EQ(w["compute"], 15);
    EXPECT_EQ(w["wait"], 15);
    EXPECT_GE(w["push"], 15);
    EXPECT_EQ(w["pull"], 16);  // Joining, then every step.
  }
  EXPECT_EQ(pids.size(), 3u);

  // Strict JSON by an independent parser, where one is installed.
  if (std::system("python3 -c 'import json' >/dev/null 2>&1") == 0) {
    for (const std::string f : {"/server.json", "/worker0.json", "/worker1.json"}) {
      EXPECT_EQ(std::system(absl::StrCat("python3 -c 'import json,sys; "
                                         "json.load(open(sys.argv[1]))' ",
                                         dir, f)
                                .c_str()),
                0)
          << f;
    }
  }

  RunResult merge = RunProcess({kBin + "/lockstep_ctl", "merge-traces",
                                dir + "/all.json", dir + "/server.json",
                                dir + "/worker0.json", dir + "/worker1.json"});
  ASSERT_EQ(merge.exit_code, 0) << merge.output;
  std::set<int64_t> merged_pids;
  std::map<std::string, int> all =
      CheckTrace(dir + "/all.json", start, end, &merged_pids);
  EXPECT_EQ(merged_pids, pids);
  EXPECT_EQ(all["apply"], 15);
  EXPECT_EQ(all["compute"], 30);
}

}  // namespace
}  // namespace lockstep
