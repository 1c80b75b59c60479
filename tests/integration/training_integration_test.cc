// End-to-end tests through real lockstep_server and lockstep_worker processes
// talking gRPC on loopback (the sync modes and the push window:
// sync_modes_integration_test.cc).
#include <algorithm>
#include <cmath>
#include <cstdio>
#include <cstdlib>
#include <cstring>
#include <ostream>
#include <string>
#include <tuple>
#include <vector>

#include "absl/strings/ascii.h"
#include "absl/strings/match.h"
#include "absl/strings/str_cat.h"
#include "absl/strings/str_join.h"
#include "absl/strings/str_split.h"
#include "absl/time/clock.h"
#include "common/base/exit_codes.h"
#include "gmock/gmock.h"
#include "gtest/gtest.h"
#include "tests/integration/subprocess.h"
#include "tests/integration/training_jobs.h"

namespace lockstep {
namespace {

using ::testing::HasSubstr;

class EquivalenceTest
    : public ::testing::TestWithParam<std::tuple<std::string, int, int>> {};

// W workers x batch B, synchronous, equal one worker with batch W*B on the
// same examples (docs/testing.md, "Invariants": the first).
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

// The same job through a parameter server and through each all-reduce
// backend ends with the same weights (docs/testing.md, "Invariants": the
// second).
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

// With batch norm the moving statistics travel after the parameters, averaged
// by the server or by the all-reduce: both end with the same weights and
// statistics on every rank (Train checks the ranks agree).
TEST(ModelsTrainingTest, ResNet20AllReduceMatchesTheParameterServer) {
  const std::vector<std::string> resnet = {"--model=resnet20",
                                           "--input_shape=8,8,3"};
  const std::vector<float> ps = Train(2, 4, "adam", 1, resnet);
  for (const char* backend : {"gloo", "grpc-ring"}) {
    std::vector<std::string> flags = resnet;
    flags.push_back("--sync=allreduce");
    flags.push_back(absl::StrCat("--allreduce=", backend));
    const std::vector<float> allreduce = Train(2, 4, "adam", 1, flags);
    ASSERT_EQ(allreduce.size(), ps.size()) << backend;
    const double difference = MaxRelativeDifference(allreduce, ps);
    std::printf("ResNet-20, %s all-reduce vs PS: %.3g\n", backend, difference);
    EXPECT_LE(difference, 1e-6) << backend;
  }
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
  const std::string address = absl::StrCat("127.0.0.1:", FreePort());
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

// --eval_every_epoch evaluates after every epoch but the last (the final
// evaluation covers it), and --augment (random crop and flip of image
// models) changes what is trained on.
TEST(TrainingTest, EpochEvaluationAndAugmentation) {
  const std::string dir = MakeTempDir();
  auto run = [&](const std::string& name, bool augment) {
    std::vector<std::string> argv = {kBin + "/lockstep_launch",
                                     "--workers=1",
                                     "--summary_json=" + dir + "/" + name,
                                     "--",
                                     "--dataset=synthetic",
                                     "--synthetic_examples=256",
                                     "--model=cnn",
                                     "--input_shape=16,16,3",
                                     "--batch_size=32",
                                     "--epochs=2",
                                     "--eval_every_epoch",
                                     "--progress=none"};
    if (augment) argv.push_back("--augment");
    return RunProcess(argv, {}, kDeadline);
  };
  const RunResult plain = run("plain", false);
  ASSERT_EQ(plain.exit_code, 0) << plain.output;
  EXPECT_THAT(plain.output, HasSubstr("Epoch 1/2 - test loss "));
  EXPECT_THAT(plain.output, Not(HasSubstr("Epoch 2/2 - test loss ")));
  EXPECT_THAT(plain.output, HasSubstr("Test accuracy "));
  const RunResult augmented = run("augmented", true);
  ASSERT_EQ(augmented.exit_code, 0) << augmented.output;
  const std::string a = ReadFile(dir + "/plain");
  const std::string b = ReadFile(dir + "/augmented");
  const size_t at = a.find("\"train_loss\": ");
  ASSERT_NE(at, std::string::npos) << a;
  EXPECT_NE(a.substr(at, 40), b.substr(b.find("\"train_loss\": "), 40))
      << "the same training loss with and without augmentation";
}

// Lines of `output` that start with `prefix` and hold `text`.
int CountLines(const std::string& output, const std::string& prefix,
               const std::string& text) {
  int count = 0;
  for (absl::string_view line : absl::StrSplit(output, '\n')) {
    if (absl::StartsWith(line, prefix) && absl::StrContains(line, text)) {
      ++count;
    }
  }
  return count;
}

// --validation_split holds out the last 128 of 640 examples on every
// worker; each epoch's final progress line on each rank carries the
// validation figures, and the summary's history lists them per epoch.
TEST(TrainingTest, ValidationSplitIsEvaluatedEveryEpoch) {
  const std::string dir = MakeTempDir();
  const RunResult r = RunProcess(
      {kBin + "/lockstep_launch", "--workers=2",
       "--summary_json=" + dir + "/summary", "--", "--dataset=synthetic",
       "--synthetic_examples=640", "--layers=8,4", "--batch_size=32",
       "--epochs=2", "--validation_split=0.2", "--progress=lines"},
      {}, kDeadline);
  ASSERT_EQ(r.exit_code, 0) << r.output;
  EXPECT_THAT(r.output,
              HasSubstr("on 512 examples (validating on 128) with 2 worker"));
  for (const char* rank : {"[worker0] ", "[worker1] "}) {
    EXPECT_EQ(CountLines(r.output, std::string(rank) + "Epoch ", "/2"), 2)
        << r.output;
    // 512 examples / (2 x 32): 8 steps an epoch.
    EXPECT_EQ(
        CountLines(r.output, std::string(rank) + "8/8 [", " - val_accuracy: "),
        2)
        << r.output;
  }
  const std::string summary = ReadFile(dir + "/summary");
  EXPECT_THAT(summary, HasSubstr("\"epoch\": [1, 2]")) << summary;
  const size_t at = summary.find("\"val_loss\": [");
  ASSERT_NE(at, std::string::npos) << summary;
  const std::string list = summary.substr(at, summary.find(']', at) - at);
  EXPECT_EQ(std::count(list.begin(), list.end(), ','), 1) << list;
}

// --max_steps=5 of 20-step epochs: the progress says one epoch of 5 steps.
TEST(TrainingTest, ProgressCountsTheEpochsAndStepsThatRun) {
  const RunResult r = RunProcess(
      {kBin + "/lockstep_launch", "--workers=1", "--", "--dataset=synthetic",
       "--synthetic_examples=640", "--layers=8,4", "--batch_size=32",
       "--max_steps=5", "--progress=lines"},
      {}, kDeadline);
  ASSERT_EQ(r.exit_code, 0) << r.output;
  EXPECT_EQ(CountLines(r.output, "[worker0] Epoch 1/1", ""), 1) << r.output;
  EXPECT_EQ(
      CountLines(r.output, "[worker0] 5/5 [==============================]",
                 " examples/s"),
      1)
      << r.output;
  EXPECT_THAT(r.output, Not(HasSubstr("Epoch 1/5"))) << r.output;
  EXPECT_THAT(r.output, Not(HasSubstr("/20 ["))) << r.output;
  EXPECT_THAT(r.output, HasSubstr("[worker0] Trained 5 steps - "));
}

}  // namespace
}  // namespace lockstep
