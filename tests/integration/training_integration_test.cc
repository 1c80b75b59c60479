// End-to-end tests through real lockstep_server and lockstep_worker processes
// talking gRPC on loopback.
#include <algorithm>
#include <tuple>
#include <cmath>
#include <cstdio>
#include <cstdlib>
#include <cstring>
#include <optional>
#include <ostream>
#include <string>
#include <vector>

#include "absl/strings/ascii.h"
#include "absl/strings/str_cat.h"
#include "absl/strings/str_join.h"
#include "absl/strings/str_split.h"
#include "absl/time/clock.h"
#include "gmock/gmock.h"
#include "gtest/gtest.h"
#include "tests/integration/subprocess.h"

namespace lockstep {
namespace {

using ::testing::HasSubstr;
using ::testing::Not;

const std::string kBin = LOCKSTEP_BIN_DIR;
const absl::Duration kDeadline = absl::Seconds(120);

// A server on a free loopback port, started with --port_file.
struct Server {
  Subprocess process;
  std::string address;
};

Server StartServer(int workers, const std::string& dir, int shard = 0,
                   int num_shards = 1) {
  const std::string port_file = absl::StrCat(dir, "/port", shard);
  Server s{Subprocess::Start({kBin + "/lockstep_server",
                              "--listen=127.0.0.1:0",
                              absl::StrCat("--workers=", workers),
                              absl::StrCat("--shard=", shard),
                              absl::StrCat("--num_shards=", num_shards),
                              "--port_file=" + port_file}),
           ""};
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

std::vector<float> ReadWeights(const std::string& path) {
  const std::string bytes = ReadFile(path);
  std::vector<float> w(bytes.size() / sizeof(float));
  std::memcpy(w.data(), bytes.data(), w.size() * sizeof(float));
  return w;
}

// max |a - b| / max |b|: the difference relative to the weights' scale.
double MaxRelativeDifference(const std::vector<float>& a,
                             const std::vector<float>& b) {
  double diff = 0, scale = 0;
  for (size_t i = 0; i < a.size(); ++i) {
    diff = std::max(diff, std::fabs(double{a[i]} - b[i]));
    scale = std::max(scale, std::fabs(double{b[i]}));
  }
  return diff / scale;
}

// Trains `workers` workers with batch `batch` each for 20 steps against
// `shards` server shards and returns rank 0's final weights (checking every
// rank ends with the same ones).
std::vector<float> Train(int workers, int batch, const std::string& optimizer,
                         int shards = 1,
                         const std::vector<std::string>& extra = {}) {
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
        kBin + "/lockstep_worker",
        "--servers=" + absl::StrJoin(addresses, ","),
        absl::StrCat("--workers=", workers), absl::StrCat("--rank=", rank),
        "--dataset=synthetic", "--synthetic_examples=640",
        "--layers=23,17,5", "--optimizer=" + optimizer,
        absl::StrCat("--batch_size=", batch), "--max_steps=20",
        "--epochs=3", "--seed=7", "--chunk_bytes=1000", "--progress=none",
        absl::StrCat("--dump_weights=", dir, "/w", rank)};
    argv.insert(argv.end(), extra.begin(), extra.end());
    procs.push_back(Subprocess::Start(argv));
  }
  for (int rank = 0; rank < workers; ++rank) {
    std::optional<int> code = procs[rank].Wait(kDeadline);
    EXPECT_EQ(code, 0) << procs[rank].Output();
  }
  for (Server& server : servers) {
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

class EquivalenceTest
    : public ::testing::TestWithParam<std::tuple<std::string, int, int>> {};

// W workers x batch B, synchronous, equal one worker with batch W*B on the
// same examples (DESIGN.md's first invariant).
TEST_P(EquivalenceTest, WorkersTimesBatchEqualsOneBigBatch) {
  const auto& [optimizer, workers, shards] = GetParam();
  const int batch = 8;
  std::vector<float> many = Train(workers, batch, optimizer, shards);
  std::vector<float> one = Train(1, workers * batch, optimizer);
  ASSERT_EQ(many.size(), size_t{23 * 17 + 17 + 17 * 5 + 5});
  ASSERT_EQ(one.size(), many.size());
  const double difference = MaxRelativeDifference(many, one);
  std::printf("max relative difference %s %d workers, %d shards vs 1: %.3g\n",
              optimizer.c_str(), workers, shards, difference);
  EXPECT_LE(difference, 1e-5);
  // And training moved the weights: the comparison is not of two copies of
  // version 0.
  const std::string dir = MakeTempDir();
  Server server = StartServer(1, dir);
  RunResult init = RunProcess(
      {kBin + "/lockstep_worker", "--servers=" + server.address,
       "--workers=1", "--rank=0", "--dataset=synthetic",
       "--synthetic_examples=640", "--layers=23,17,5",
       "--optimizer=" + optimizer, "--batch_size=8", "--max_steps=1",
       "--seed=7", "--chunk_bytes=1000", "--progress=none",
       "--dump_weights=" + dir + "/w"},
      {}, kDeadline);
  ASSERT_EQ(init.exit_code, 0) << init.output;
  EXPECT_GT(MaxRelativeDifference(ReadWeights(dir + "/w"), one), 1e-3);
}

INSTANTIATE_TEST_SUITE_P(
    SgdAndAdam, EquivalenceTest,
    ::testing::Combine(::testing::Values("sgd", "adam"),
                       ::testing::Values(2, 4), ::testing::Values(1, 2, 3)),
    [](const auto& info) {
      return absl::StrCat(std::get<0>(info.param), "_",
                          std::get<1>(info.param), "workers_",
                          std::get<2>(info.param), "shards");
    });

// The push window changes when chunks travel, never what is summed: 32
// chunks through windows of 1 and 3 and with no window end on the same
// weights bit for bit. (Two workers, because the server adds pushes in
// arrival order, and only a sum of two is the same in either order.)
TEST(TrainingTest, PushWindowLeavesTheWeightsAlone) {
  const std::vector<float> unlimited =
      Train(2, 8, "adam", 2, {"--chunk_bytes=64", "--push_window=0"});
  ASSERT_EQ(unlimited.size(), size_t{23 * 17 + 17 + 17 * 5 + 5});
  for (const char* window : {"--push_window=1", "--push_window=3"}) {
    SCOPED_TRACE(window);
    EXPECT_EQ(Train(2, 8, "adam", 2, {"--chunk_bytes=64", window}), unlimited);
  }
}

// A shard lost mid-step stops only the pushes to it: each worker still
// sends the surviving shard every chunk, which the other worker's pushes
// there wait for, so both leave with the retryable code once their rejoin
// timeout (2 s) passes -- not after the survivor's step timeout (300 s),
// as when a failure stopped every shard's window.
TEST(TrainingTest, LosingOneShardDoesNotStallTheOther) {
  const std::string dir = MakeTempDir();
  std::vector<Server> servers;
  std::vector<std::string> addresses;
  for (int shard = 0; shard < 2; ++shard) {
    servers.push_back(StartServer(2, dir, shard, 2));
    addresses.push_back(servers.back().address);
  }
  std::vector<Subprocess> procs;
  for (int rank = 0; rank < 2; ++rank) {
    procs.push_back(Subprocess::Start(
        {kBin + "/lockstep_worker",
         "--servers=" + absl::StrJoin(addresses, ","), "--workers=2",
         absl::StrCat("--rank=", rank), "--dataset=synthetic",
         "--synthetic_examples=640", "--layers=23,17,5", "--batch_size=8",
         "--epochs=1000", "--seed=7", "--chunk_bytes=64", "--push_window=1",
         "--rejoin_timeout_s=2", "--progress=none",
         // Rank 1 a little late, so that when the shard goes, rank 0's
         // pushes to the other shard are already waiting there for it.
         "--straggle=1:20"}));
  }
  absl::SleepFor(absl::Milliseconds(1500));  // Some steps in.
  for (Subprocess& proc : procs) {
    ASSERT_EQ(proc.Wait(absl::Milliseconds(1)), std::nullopt)
        << "the job ended before the shard was lost\n" << proc.Output();
  }
  servers[1].process.Kill();
  for (int rank = 0; rank < 2; ++rank) {
    EXPECT_EQ(procs[rank].Wait(absl::Seconds(40)), 75)
        << "rank " << rank << "\n" << procs[rank].Output();
  }
  servers[0].process.Kill();
}

// Narrow wire types round gradients and weights on the wire only: replicas
// stay identical and the result stays close to fp32's.
TEST(TrainingTest, HalfPrecisionWireStaysCloseToFp32) {
  const std::vector<float> fp32 = Train(2, 8, "adam", 2);
  for (const char* dtype : {"bf16", "fp16"}) {
    const std::vector<float> narrow =
        Train(2, 8, "adam", 2, {absl::StrCat("--wire_dtype=", dtype)});
    ASSERT_EQ(narrow.size(), fp32.size());
    const double difference = MaxRelativeDifference(narrow, fp32);
    std::printf("%s wire vs fp32 after 20 Adam steps: %.3g\n", dtype,
                difference);
    EXPECT_GT(difference, 0) << dtype << " changed nothing: not applied?";
    EXPECT_LT(difference, 0.05) << dtype;
  }
}

// The integer value of "key" in a flat JSON object (-1 when absent).
int64_t JsonInt(const std::string& json, const std::string& key) {
  const std::string quoted = "\"" + key + "\": ";
  const size_t at = json.find(quoted);
  if (at == std::string::npos) return -1;
  return std::strtoll(json.c_str() + at + quoted.size(), nullptr, 10);
}

// Runs `workers` workers against one server with extra flags and returns
// each rank's summary JSON text.
std::vector<std::string> RunJob(int workers,
                                const std::vector<std::string>& extra) {
  const std::string dir = MakeTempDir();
  Server server = StartServer(workers, dir);
  std::vector<Subprocess> procs;
  for (int rank = 0; rank < workers; ++rank) {
    std::vector<std::string> argv = {
        kBin + "/lockstep_worker", "--servers=" + server.address,
        absl::StrCat("--workers=", workers), absl::StrCat("--rank=", rank),
        "--dataset=synthetic", "--synthetic_examples=640", "--layers=23,17,5",
        "--batch_size=8", "--max_steps=20", "--progress=none",
        absl::StrCat("--summary_json=", dir, "/s", rank)};
    argv.insert(argv.end(), extra.begin(), extra.end());
    procs.push_back(Subprocess::Start(argv));
  }
  std::vector<std::string> summaries;
  for (int rank = 0; rank < workers; ++rank) {
    EXPECT_EQ(procs[rank].Wait(kDeadline), 0) << procs[rank].Output();
    summaries.push_back(ReadFile(absl::StrCat(dir, "/s", rank)));
  }
  EXPECT_EQ(server.process.Wait(kDeadline), 0) << server.process.Output();
  return summaries;
}

// With one backup worker, a straggler that sleeps 2 s per step cannot hold
// the others back: they finish all 20 steps while its late gradients are
// dropped and it skips ahead to the current version.
TEST(SyncModesTest, BackupWorkerLeavesTheStragglerBehind) {
  const std::vector<std::string> s = RunJob(
      3, {"--backup_workers=1", "--straggle=2:2000", "--sync=ps"});
  EXPECT_THAT(s[0], HasSubstr("\"steps\": 20,"));
  EXPECT_THAT(s[1], HasSubstr("\"steps\": 20,"));
  EXPECT_THAT(s[2], Not(HasSubstr("\"steps\": 20,"))) << s[2];
  EXPECT_THAT(s[2], HasSubstr("\"final_version\": 20,"));
}

// The same through a push window of 1 over 32 chunks, where every chunk
// but one waits for a reply: backup workers' dropped pushes, asynchronous
// replies and SSP's held pushes must all free the window.
TEST(SyncModesTest, ModesWorkThroughANarrowPushWindow) {
  const std::vector<std::string> window = {"--chunk_bytes=64",
                                           "--push_window=1"};
  auto with_window = [&](std::vector<std::string> flags) {
    flags.insert(flags.end(), window.begin(), window.end());
    return flags;
  };
  const std::vector<std::string> backup = RunJob(
      3, with_window({"--backup_workers=1", "--straggle=2:500", "--sync=ps"}));
  EXPECT_THAT(backup[0], HasSubstr("\"steps\": 20,"));
  EXPECT_THAT(backup[2], HasSubstr("\"final_version\": 20,"));
  for (const char* mode : {"--sync=async", "--sync=ssp"}) {
    const std::vector<std::string> s = RunJob(2, with_window({mode}));
    for (const std::string& summary : s) {
      EXPECT_THAT(summary, HasSubstr("\"steps\": 20,")) << mode;
    }
  }
}

TEST(SyncModesTest, AsyncAndSspFinishEveryStep) {
  for (const std::vector<std::string>& flags :
       {std::vector<std::string>{"--sync=async"},
        std::vector<std::string>{"--sync=ssp", "--staleness=2"}}) {
    const std::vector<std::string> s = RunJob(2, flags);
    int64_t last_version = 0;
    for (const std::string& summary : s) {
      EXPECT_THAT(summary, HasSubstr("\"steps\": 20,")) << flags[0];
      last_version = std::max(last_version, JsonInt(summary, "final_version"));
    }
    // Every push is applied on its own: two workers make 40 versions, and
    // the last to finish sees them all.
    EXPECT_EQ(last_version, 40) << flags[0];
  }
}

// In async mode the server's version counts every push, so a worker that
// joins after the others have finished finds it past its own 20 steps; it
// must still train them (it once refused, when loading its data was slow).
TEST(SyncModesTest, AsyncWorkerThatJoinsLateStillTrains) {
  const std::string dir = MakeTempDir();
  Server server = StartServer(3, dir);
  auto start = [&](int rank) {
    return Subprocess::Start(
        {kBin + "/lockstep_worker", "--servers=" + server.address,
         "--workers=3", absl::StrCat("--rank=", rank), "--sync=async",
         "--dataset=synthetic", "--synthetic_examples=640", "--layers=23,17,5",
         "--batch_size=8", "--max_steps=20", "--progress=none",
         absl::StrCat("--summary_json=", dir, "/s", rank)});
  };
  std::vector<Subprocess> early;
  for (int rank = 0; rank < 2; ++rank) early.push_back(start(rank));
  for (Subprocess& p : early) EXPECT_EQ(p.Wait(kDeadline), 0) << p.Output();
  Subprocess late = start(2);
  EXPECT_EQ(late.Wait(kDeadline), 0) << late.Output();
  const std::string summary = ReadFile(absl::StrCat(dir, "/s2"));
  EXPECT_THAT(summary, HasSubstr("\"steps\": 20,"));
  EXPECT_EQ(JsonInt(summary, "final_version"), 60) << summary;
  EXPECT_EQ(server.process.Wait(kDeadline), 0) << server.process.Output();
}

// The same job through a parameter server and through each all-reduce
// backend ends with the same weights (DESIGN.md's second invariant).
class AllReduceTest
    : public ::testing::TestWithParam<std::tuple<std::string, std::string>> {};

TEST_P(AllReduceTest, MatchesTheParameterServer) {
  const auto& [optimizer, backend] = GetParam();
  const std::vector<float> ps = Train(2, 8, optimizer);
  const std::vector<float> allreduce = Train(
      2, 8, optimizer, 1, {"--sync=allreduce", "--allreduce=" + backend});
  ASSERT_EQ(allreduce.size(), ps.size());
  const double difference = MaxRelativeDifference(allreduce, ps);
  std::printf("%s all-reduce vs PS, %s: %.3g\n", backend.c_str(),
              optimizer.c_str(), difference);
  EXPECT_LE(difference, 1e-6);
}

INSTANTIATE_TEST_SUITE_P(
    Backends, AllReduceTest,
    ::testing::Combine(::testing::Values("sgd", "adam"),
                       ::testing::Values("gloo", "grpc-ring")),
    [](const auto& info) {
      std::string name = absl::StrCat(std::get<0>(info.param), "_",
                                      std::get<1>(info.param));
      std::replace(name.begin(), name.end(), '-', '_');
      return name;
    });

// A convolutional network without batch norm: W workers x batch B equal one
// worker with batch W*B, as for the MLP.
TEST(ModelsTrainingTest, CnnWorkersTimesBatchEqualsOneBigBatch) {
  const std::vector<std::string> cnn = {"--model=cnn", "--input_shape=16,16,1"};
  const std::vector<float> two = Train(2, 4, "adam", 2, cnn);
  const std::vector<float> one = Train(1, 8, "adam", 1, cnn);
  ASSERT_EQ(two.size(), one.size());
  EXPECT_LE(MaxRelativeDifference(two, one), 1e-5);
}

// ResNet-20 learns through the real server, and the batch-norm statistics
// (saved after the parameters) end identical on both workers.
TEST(ModelsTrainingTest, ResNet20TrainsThroughTheServer) {
  const std::vector<std::string> s = RunJob(
      2, {"--model=resnet20", "--input_shape=8,8,3", "--optimizer=adam",
          "--synthetic_examples=128", "--max_steps=0", "--epochs=4"});
  for (const std::string& summary : s) {
    const size_t at = summary.find("\"train_loss\": ");
    ASSERT_NE(at, std::string::npos) << summary;
    const double loss = std::strtod(summary.c_str() + at + 14, nullptr);
    // Chance is ln(10) = 2.30.
    EXPECT_LT(loss, 1.0) << summary;
  }
}

TEST(TrainingTest, LauncherTrainsAndWritesSummary) {
  const std::string dir = MakeTempDir();
  RunResult r = RunProcess(
      {kBin + "/lockstep_launch", "--workers=2", "--ps=1",
       "--summary_json=" + dir + "/summary.json", "--dataset=synthetic",
       "--synthetic_examples=2560", "--layers=32,16,4", "--epochs=2",
       "--batch_size=32"},
      {}, kDeadline);
  ASSERT_EQ(r.exit_code, 0) << r.output;
  EXPECT_THAT(r.output, HasSubstr("[worker0]"));
  EXPECT_THAT(r.output, HasSubstr("[ps0]"));
  EXPECT_THAT(r.output, HasSubstr("Test accuracy"));
  const std::string summary = ReadFile(dir + "/summary.json");
  for (const char* key : {"test_accuracy", "test_loss", "examples_per_sec",
                          "\"steps\": 80", "\"final_version\": 80",
                          "wall_seconds"}) {
    EXPECT_THAT(summary, HasSubstr(key)) << summary;
  }
}

TEST(TrainingTest, LauncherFailsWhenAWorkerFails) {
  RunResult r = RunProcess({kBin + "/lockstep_launch", "--workers=2",
                            "--data_dir=/nonexistent/lockstep"},
                           {}, kDeadline);
  EXPECT_NE(r.exit_code, 0);
  EXPECT_NE(r.exit_code, -1) << "the launcher hung:\n" << r.output;
  EXPECT_THAT(r.output, HasSubstr("/nonexistent/lockstep"));
}

TEST(TrainingTest, TfConfigAloneConfiguresTheJob) {
  // A free port: bind, read, release (the server rebinds it at once).
  const std::string dir = MakeTempDir();
  Server probe = StartServer(1, dir);
  const std::string address = probe.address;
  probe.process.Kill();
  const std::string cluster = absl::StrCat(
      R"({"cluster": {"ps": [")", address,
      R"("], "worker": ["w0:1", "w1:1"]}, "task": {"type": ")");
  // No flags at all: the server takes its port from its own ps entry.
  Subprocess server = Subprocess::Start(
      {kBin + "/lockstep_server"},
      {"TF_CONFIG=" + cluster + R"(ps", "index": 0}})"});
  std::vector<Subprocess> workers;
  for (int i = 0; i < 2; ++i) {
    workers.push_back(Subprocess::Start(
        {kBin + "/lockstep_worker", "--dataset=synthetic",
         "--synthetic_examples=640", "--layers=8,4", "--max_steps=5",
         "--progress=none"},
        {absl::StrCat("TF_CONFIG=", cluster, R"(worker", "index": )", i,
                      "}}")}));
  }
  for (Subprocess& w : workers) EXPECT_EQ(w.Wait(kDeadline), 0) << w.Output();
  EXPECT_EQ(server.Wait(kDeadline), 0) << server.Output();
}

TEST(BadInputTest, WorkerWithAnotherModelIsRefusedAtConnect) {
  const std::string dir = MakeTempDir();
  Server server = StartServer(2, dir);
  const std::vector<std::string> common = {
      kBin + "/lockstep_worker", "--servers=" + server.address,
      "--workers=2", "--dataset=synthetic", "--synthetic_examples=640",
      "--progress=none", "--max_steps=3"};
  std::vector<std::string> rank0 = common;
  rank0.insert(rank0.end(), {"--rank=0", "--layers=10,6,3"});
  std::vector<std::string> rank1 = common;
  rank1.insert(rank1.end(), {"--rank=1", "--layers=10,7,3"});
  // Rank 0's model is the job's, whichever registers first: rank 1 is told
  // what differs at once, not left waiting.
  Subprocess first = Subprocess::Start(rank0);
  RunResult refused = RunProcess(rank1, {}, absl::Seconds(30));
  EXPECT_EQ(refused.exit_code, 2) << refused.output;  // Permanent.
  EXPECT_THAT(refused.output, HasSubstr("model signature differs"));
  EXPECT_THAT(refused.output, HasSubstr("dense_0/kernel[10,6]"));
}

struct BadRun {
  std::string name;
  std::vector<std::string> args;
  std::vector<std::string> env;
  std::string message;
};

// Keeps ctest's test names short: the case name, not the bytes.
void PrintTo(const BadRun& run, std::ostream* os) { *os << run.name; }

class BadFlagsTest : public ::testing::TestWithParam<BadRun> {};

TEST_P(BadFlagsTest, ExitsNonZeroWithAClearMessage) {
  const BadRun& run = GetParam();
  std::vector<std::string> argv = {kBin + "/" + run.args[0]};
  argv.insert(argv.end(), run.args.begin() + 1, run.args.end());
  RunResult r = RunProcess(argv, run.env, absl::Seconds(30));
  EXPECT_NE(r.exit_code, 0) << r.output;
  EXPECT_NE(r.exit_code, -1) << "hung";
  EXPECT_THAT(r.output, HasSubstr(run.message));
}

const char kWorker[] = "lockstep_worker";
const char kServer[] = "lockstep_server";

INSTANTIATE_TEST_SUITE_P(
    Cases, BadFlagsTest,
    ::testing::Values(
        BadRun{"batch", {kWorker, "--servers=127.0.0.1:1", "--workers=1",
                         "--rank=0", "--batch_size=0"}, {}, "--batch_size"},
        BadRun{"optimizer", {kWorker, "--servers=127.0.0.1:1", "--workers=1",
                             "--rank=0", "--optimizer=rmsprop"}, {},
               "--optimizer must be"},
        BadRun{"layers", {kWorker, "--servers=127.0.0.1:1", "--workers=1",
                          "--rank=0", "--layers=784,abc"}, {}, "--layers"},
        BadRun{"rank", {kWorker, "--servers=127.0.0.1:1", "--workers=2",
                        "--rank=2"}, {}, "--rank must be in [0, 2)"},
        BadRun{"unknown_flag", {kWorker, "--no_such_flag=1"}, {},
               "no_such_flag"},
        BadRun{"no_server", {kWorker, "--workers=1", "--rank=0"}, {},
               "no parameter server"},
        BadRun{"tf_config_json", {kWorker}, {"TF_CONFIG={not json"},
               "malformed TF_CONFIG"},
        BadRun{"tf_config_index",
               {kWorker},
               {R"(TF_CONFIG={"cluster": {"ps": ["a:1"], "worker": ["b:1"]},
                   "task": {"type": "worker", "index": 3}})"},
               "out of range"},
        BadRun{"server_tf_config_role",
               {kServer},
               {R"(TF_CONFIG={"cluster": {"ps": ["a:1"], "worker": ["b:1"]},
                   "task": {"type": "worker", "index": 0}})"},
               "lockstep_server runs ps tasks"},
        BadRun{"server_workers", {kServer, "--workers=0"}, {}, "--workers"},
        BadRun{"missing_data", {kWorker, "--servers=127.0.0.1:1",
                                "--workers=1", "--rank=0",
                                "--data_dir=/nonexistent/dir"}, {},
               "/nonexistent/dir/train-images-idx3-ubyte"}),
    [](const auto& info) { return info.param.name; });

// A truncated IDX file gets a message naming it, not a crash.
TEST(BadInputTest, TruncatedIdxFileIsNamed) {
  const std::string dir = MakeTempDir();
  const unsigned char header[] = {0, 0, 8, 3, 0, 0, 0, 2, 0, 0, 0, 28,
                                  0, 0, 0, 28, 1, 2, 3};
  for (const char* name : {"train-images-idx3-ubyte", "t10k-images-idx3-ubyte"}) {
    FILE* f = std::fopen((dir + "/" + name).c_str(), "wb");
    ASSERT_NE(f, nullptr);
    std::fwrite(header, 1, sizeof(header), f);
    std::fclose(f);
  }
  RunResult r = RunProcess({kBin + "/lockstep_worker", "--servers=127.0.0.1:1",
                            "--workers=1", "--rank=0", "--data_dir=" + dir},
                           {}, absl::Seconds(30));
  EXPECT_EQ(r.exit_code, 2) << r.output;
  EXPECT_THAT(r.output, HasSubstr("train-images-idx3-ubyte"));
  EXPECT_THAT(r.output, HasSubstr("truncated"));
}

}  // namespace
}  // namespace lockstep
