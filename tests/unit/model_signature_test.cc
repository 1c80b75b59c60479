#include "common/model/model_signature.h"

#include <dirent.h>
#include <grpcpp/support/status.h>
#include <unistd.h>

#include <atomic>
#include <cstdint>
#include <cstdio>
#include <fstream>
#include <iterator>
#include <limits>
#include <string>
#include <thread>
#include <vector>

#include "absl/status/status.h"
#include "absl/strings/match.h"
#include "absl/strings/str_cat.h"
#include "absl/synchronization/mutex.h"
#include "common/base/env.h"
#include "common/formats/json_writer.h"
#include "common/rpc/grpc_status.h"
#include "gmock/gmock.h"
#include "gtest/gtest.h"
#include "tests/unit/model_signature_test_util.h"

namespace lockstep {
namespace {

using ::testing::ElementsAre;
using ::testing::HasSubstr;
using ::testing::IsEmpty;

TEST(ModelSignatureTest, NumParametersAndOffsets) {
  const ModelSignature s = Mlp();
  EXPECT_EQ(s.tensors[0].NumElements(), 100352);
  EXPECT_EQ(s.NumParameters(), 100352 + 128 + 1280 + 10);
  EXPECT_THAT(s.TensorOffsets(), ElementsAre(0, 100352, 100480, 101760));
}

TEST(ModelSignatureTest, EmptyScalarAndZeroSizedTensors) {
  ModelSignature s;
  EXPECT_EQ(s.NumParameters(), 0);
  EXPECT_THAT(s.TensorOffsets(), IsEmpty());

  // A scalar (empty shape) holds one element; a zero dimension holds none.
  s.tensors = {{"scale", {}}, {"empty", {3, 0}}, {"bias", {5}}};
  EXPECT_EQ(s.tensors[0].NumElements(), 1);
  EXPECT_EQ(s.tensors[1].NumElements(), 0);
  EXPECT_EQ(s.NumParameters(), 6);
  EXPECT_THAT(s.TensorOffsets(), ElementsAre(0, 1, 1));
}

TEST(OptimizerConfigTest, KerasDefaults) {
  const OptimizerConfig sgd = OptimizerConfig::Defaults("sgd");
  EXPECT_EQ(sgd.name, "sgd");
  EXPECT_EQ(sgd.learning_rate, 0.01);
  EXPECT_EQ(sgd.momentum, 0.0);
  EXPECT_FALSE(sgd.nesterov);
  EXPECT_EQ(sgd.weight_decay, 0.0);

  const OptimizerConfig momentum = OptimizerConfig::Defaults("momentum");
  EXPECT_EQ(momentum.name, "momentum");
  EXPECT_EQ(momentum.learning_rate, 0.01);
  EXPECT_EQ(momentum.momentum, 0.9);
  EXPECT_FALSE(momentum.nesterov);
  EXPECT_EQ(momentum.weight_decay, 0.0);

  const OptimizerConfig adam = OptimizerConfig::Defaults("adam");
  EXPECT_EQ(adam.name, "adam");
  EXPECT_EQ(adam.learning_rate, 0.001);
  EXPECT_EQ(adam.beta_1, 0.9);
  EXPECT_EQ(adam.beta_2, 0.999);
  EXPECT_EQ(adam.epsilon, 1e-7);
  EXPECT_EQ(adam.momentum, 0.0);
  EXPECT_EQ(adam.weight_decay, 0.0);
  EXPECT_TRUE(adam == OptimizerConfig());

  const OptimizerConfig adamw = OptimizerConfig::Defaults("adamw");
  EXPECT_EQ(adamw.name, "adamw");
  EXPECT_EQ(adamw.learning_rate, 0.001);
  EXPECT_EQ(adamw.beta_1, 0.9);
  EXPECT_EQ(adamw.beta_2, 0.999);
  EXPECT_EQ(adamw.epsilon, 1e-7);
  EXPECT_EQ(adamw.weight_decay, 0.004);

  EXPECT_FALSE(sgd == momentum);
  EXPECT_FALSE(adam == adamw);
}

TEST(DescribeDifferenceTest, EmptyWhenEqual) {
  EXPECT_EQ(DescribeDifference(Mlp(), Mlp()), "");
  EXPECT_EQ(DescribeDifference(ModelSignature(), ModelSignature()), "");
}

TEST(DescribeDifferenceTest, NamesNumWorkers) {
  ModelSignature got = Mlp();
  got.num_workers = 3;
  EXPECT_EQ(DescribeDifference(Mlp(), got),
            "num_workers: job has 2, worker says 3");
}

TEST(DescribeDifferenceTest, NamesTensorCount) {
  ModelSignature got = Mlp();
  got.tensors.pop_back();
  EXPECT_EQ(DescribeDifference(Mlp(), got),
            "tensor count: job has 4, worker has 3");
}

TEST(DescribeDifferenceTest, NamesTensorName) {
  ModelSignature got = Mlp();
  got.tensors[1].name = "dense/b";
  EXPECT_EQ(DescribeDifference(Mlp(), got),
            "tensor 1: job has dense/bias[128], worker has dense/b[128]");
}

TEST(DescribeDifferenceTest, NamesTensorShape) {
  ModelSignature got = Mlp();
  got.tensors[2].shape = {10, 128};
  EXPECT_EQ(
      DescribeDifference(Mlp(), got),
      "tensor 2: job has out/kernel[128,10], worker has out/kernel[10,128]");
}

TEST(DescribeDifferenceTest, NamesOptimizerSettings) {
  ModelSignature got = Mlp();
  got.optimizer.learning_rate = 0.01;
  const std::string lr = DescribeDifference(Mlp(), got);
  EXPECT_THAT(lr, HasSubstr("optimizer: job has adam(lr=0.001 "));
  EXPECT_THAT(lr, HasSubstr("worker has adam(lr=0.01 "));

  got = Mlp();
  got.optimizer = OptimizerConfig::Defaults("adamw");
  const std::string name = DescribeDifference(Mlp(), got);
  EXPECT_THAT(name, HasSubstr("job has adam("));
  EXPECT_THAT(name, HasSubstr("worker has adamw("));
  EXPECT_THAT(name, HasSubstr("weight_decay=0.004)"));

  got = Mlp();
  got.optimizer.epsilon = 1e-8;
  EXPECT_THAT(DescribeDifference(Mlp(), got), HasSubstr("epsilon=1e-08"));

  got = Mlp();
  got.optimizer.nesterov = true;
  EXPECT_THAT(DescribeDifference(Mlp(), got), HasSubstr("optimizer: "));
}

// Every schedule setting takes part; the constant rate adds no text.
TEST(DescribeDifferenceTest, NamesTheLearningRateSchedule) {
  ModelSignature got = Mlp();
  got.optimizer.schedule.kind = "cosine";
  got.optimizer.schedule.decay_steps = 100;
  const std::string kind = DescribeDifference(Mlp(), got);
  EXPECT_THAT(kind, HasSubstr("epsilon=1e-07 weight_decay=0), worker has"));
  EXPECT_THAT(kind, HasSubstr("lr_schedule=cosine(decay_steps=100 "));
  ModelSignature warm = got;
  warm.optimizer.schedule.warmup_steps = 10;
  EXPECT_THAT(DescribeDifference(got, warm),
              HasSubstr("warmup_steps=0 warmup_from=0), worker has"));
  EXPECT_THAT(DescribeDifference(got, warm),
              HasSubstr("warmup_steps=10 warmup_from=0)"));
  for (auto change : {+[](LrSchedule& s) { s.staircase = true; },
                      +[](LrSchedule& s) { s.decay_rate = 0.5; },
                      +[](LrSchedule& s) { s.boundaries = {3}; },
                      +[](LrSchedule& s) { s.values = {0.5}; },
                      +[](LrSchedule& s) { s.alpha = 0.5; },
                      +[](LrSchedule& s) { s.warmup_from = 0.5; }}) {
    ModelSignature other = got;
    change(other.optimizer.schedule);
    EXPECT_THAT(DescribeDifference(got, other), HasSubstr("lr_schedule="));
  }
  EXPECT_EQ(DescribeDifference(got, got), "");
}

TEST(DescribeDifferenceTest, NamesChunkBytes) {
  ModelSignature got = Mlp();
  got.chunk_bytes = int64_t{1} << 20;
  EXPECT_EQ(DescribeDifference(Mlp(), got),
            "chunk_bytes: job has 4194304, worker has 1048576");
}

TEST(DescribeDifferenceTest, NumWorkersIsReportedFirst) {
  ModelSignature got = Mlp();
  got.chunk_bytes = 1024;
  got.optimizer.learning_rate = 0.5;
  got.tensors[0].name = "x";
  got.num_workers = 8;
  EXPECT_EQ(DescribeDifference(Mlp(), got),
            "num_workers: job has 2, worker says 8");
}

TEST(JsonWriterTest, WritesFieldsInOrder) {
  JsonObjectWriter writer;
  writer.Add("model", "mlp \"small\"\\v1\n\tnext\x01")
      .Add("steps", 42)
      .Add("bytes", int64_t{1} << 40)
      .Add("loss", 0.25)
      .Add("accuracy", std::numeric_limits<double>::quiet_NaN())
      .Add("throughput", std::numeric_limits<double>::infinity())
      .AddBool("converged", true)
      .AddBool("timed_out", false)
      .Add("key \"quoted\"", std::string("value"));
  EXPECT_EQ(writer.ToString(),
            "{\n"
            "  \"model\": \"mlp \\\"small\\\"\\\\v1\\n\\tnext\\u0001\",\n"
            "  \"steps\": 42,\n"
            "  \"bytes\": 1099511627776,\n"
            "  \"loss\": 0.25,\n"
            "  \"accuracy\": null,\n"
            "  \"throughput\": null,\n"
            "  \"converged\": true,\n"
            "  \"timed_out\": false,\n"
            "  \"key \\\"quoted\\\"\": \"value\"\n"
            "}\n");
}

TEST(JsonWriterTest, EmptyObjectAndQuoting) {
  EXPECT_EQ(JsonObjectWriter().ToString(), "{\n}\n");
  EXPECT_EQ(JsonQuote(""), "\"\"");
  EXPECT_EQ(JsonQuote("a\rb\x1f"), "\"a\\rb\\u001f\"");
  EXPECT_EQ(JsonQuote("caf\xc3\xa9"), "\"caf\xc3\xa9\"");  // UTF-8 passes.
}

std::string ReadFile(const std::string& path) {
  std::ifstream in(path, std::ios::binary);
  return std::string(std::istreambuf_iterator<char>(in),
                     std::istreambuf_iterator<char>());
}

bool FileExists(const std::string& path) { return std::ifstream(path).good(); }

std::string TempPath(const std::string& name) {
  return absl::StrCat(testing::TempDir(), "lockstep_json_writer_", getpid(),
                      "_", name);
}

// Temporary files of writes to `path` left in its folder.
std::vector<std::string> TmpFilesBeside(const std::string& path) {
  std::vector<std::string> found;
  const std::string base = path.substr(path.rfind('/') + 1);
  if (DIR* d = opendir(DirName(path).c_str())) {
    while (const dirent* e = readdir(d)) {
      const std::string name = e->d_name;
      if (absl::StartsWith(name, base + ".") && absl::EndsWith(name, ".tmp")) {
        found.push_back(name);
      }
    }
    closedir(d);
  }
  return found;
}

// Several processes (lockstep_launch's workers with one --dump_weights)
// or threads may write the same file at once: each writes its own
// temporary file, so every write succeeds and the file is whole.
TEST(WriteFileAtomicallyTest, ConcurrentWritersOfOnePathAllSucceed) {
  const std::string path = TempPath("shared.bin");
  const std::string contents(4096, 'w');
  std::atomic<int> failed{0};
  std::string first_error;
  absl::Mutex mu;
  std::vector<std::thread> writers;
  for (int t = 0; t < 4; ++t) {
    writers.emplace_back([&]() {
      for (int i = 0; i < 100; ++i) {
        if (absl::Status s = WriteFileAtomically(path, contents); !s.ok()) {
          absl::MutexLock lock(&mu);
          if (failed++ == 0) first_error = s.ToString();
        }
      }
    });
  }
  for (std::thread& w : writers) w.join();
  EXPECT_EQ(failed.load(), 0) << first_error;
  EXPECT_EQ(ReadFile(path), contents);
  EXPECT_THAT(TmpFilesBeside(path), IsEmpty());
}

TEST(WriteFileAtomicallyTest, WritesExactBytes) {
  const std::string path = TempPath("summary.json");
  const std::string contents("{\"a\": 1}\n\0binary\xff tail", 22);
  absl::Status status = WriteFileAtomically(path, contents);
  ASSERT_TRUE(status.ok()) << status;
  EXPECT_EQ(ReadFile(path), contents);
  EXPECT_THAT(TmpFilesBeside(path), IsEmpty());

  // A shorter second write replaces the file entirely.
  status = WriteFileAtomically(path, "{}\n");
  ASSERT_TRUE(status.ok()) << status;
  EXPECT_EQ(ReadFile(path), "{}\n");

  status = WriteFileAtomically(path, "");
  ASSERT_TRUE(status.ok()) << status;
  EXPECT_EQ(ReadFile(path), "");
  EXPECT_TRUE(FileExists(path));
  std::remove(path.c_str());
}

TEST(WriteFileAtomicallyTest, FailsForMissingDirectory) {
  const std::string path = TempPath("no_such_dir/summary.json");
  absl::Status status = WriteFileAtomically(path, "{}\n");
  EXPECT_EQ(status.code(), absl::StatusCode::kUnavailable);
  EXPECT_THAT(status.message(), HasSubstr("cannot write"));
  EXPECT_THAT(status.message(), HasSubstr("no_such_dir/summary.json"));
  EXPECT_FALSE(FileExists(path));
}

TEST(GrpcStatusTest, OkRoundTrips) {
  EXPECT_TRUE(ToGrpcStatus(absl::OkStatus()).ok());
  EXPECT_TRUE(FromGrpcStatus(grpc::Status::OK).ok());
  EXPECT_TRUE(FromGrpcStatus(ToGrpcStatus(absl::OkStatus())).ok());
}

TEST(GrpcStatusTest, CodeAndMessageRoundTrip) {
  struct Case {
    absl::StatusCode absl_code;
    grpc::StatusCode grpc_code;
  };
  const Case cases[] = {
      {absl::StatusCode::kCancelled, grpc::StatusCode::CANCELLED},
      {absl::StatusCode::kInvalidArgument, grpc::StatusCode::INVALID_ARGUMENT},
      {absl::StatusCode::kDeadlineExceeded,
       grpc::StatusCode::DEADLINE_EXCEEDED},
      {absl::StatusCode::kNotFound, grpc::StatusCode::NOT_FOUND},
      {absl::StatusCode::kFailedPrecondition,
       grpc::StatusCode::FAILED_PRECONDITION},
      {absl::StatusCode::kAborted, grpc::StatusCode::ABORTED},
      {absl::StatusCode::kUnimplemented, grpc::StatusCode::UNIMPLEMENTED},
      {absl::StatusCode::kInternal, grpc::StatusCode::INTERNAL},
      {absl::StatusCode::kUnavailable, grpc::StatusCode::UNAVAILABLE},
      {absl::StatusCode::kDataLoss, grpc::StatusCode::DATA_LOSS},
      {absl::StatusCode::kUnauthenticated, grpc::StatusCode::UNAUTHENTICATED},
  };
  for (const Case& c : cases) {
    const std::string message =
        absl::StrCat("step 7: code ", static_cast<int>(c.absl_code));
    const absl::Status original(c.absl_code, message);
    const grpc::Status wire = ToGrpcStatus(original);
    EXPECT_EQ(wire.error_code(), c.grpc_code) << message;
    EXPECT_EQ(wire.error_message(), message);

    EXPECT_EQ(FromGrpcStatus(wire), original);
    const absl::Status from_grpc =
        FromGrpcStatus(grpc::Status(c.grpc_code, message));
    EXPECT_EQ(from_grpc.code(), c.absl_code);
    EXPECT_EQ(from_grpc.message(), message);
  }
}

}  // namespace
}  // namespace lockstep
