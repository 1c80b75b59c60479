#include "common/model/signature_limits.h"

#include <cmath>
#include <limits>

#include "gmock/gmock.h"
#include "gtest/gtest.h"

namespace lockstep {
namespace {

using ::testing::HasSubstr;

ModelSignature Mlp() {
  ModelSignature s;
  s.tensors = {{"dense/kernel", {784, 128}},
               {"dense/bias", {128}},
               {"dense_1/kernel", {128, 10}},
               {"dense_1/bias", {10}}};
  s.num_workers = 2;
  return s;
}

TEST(SignatureLimitsTest, AcceptsTheTutorialModel) {
  EXPECT_TRUE(ValidateSignature(Mlp(), SignatureLimits()).ok());
}

TEST(SignatureLimitsTest, RefusesNegativeAndOverflowingShapes) {
  ModelSignature s = Mlp();
  s.tensors[1].shape = {-128};
  EXPECT_THAT(ValidateSignature(s, SignatureLimits()).message(),
              HasSubstr("dimension -128"));
  // 2^40 * 2^40 overflows int64: refused, not wrapped.
  s.tensors[1].shape = {int64_t{1} << 40, int64_t{1} << 40, 0};
  absl::Status status = ValidateSignature(s, SignatureLimits());
  EXPECT_EQ(status.code(), absl::StatusCode::kInvalidArgument);
  EXPECT_THAT(status.message(), HasSubstr("(the server's limit)"));
  s.tensors[1].shape = {int64_t{1} << 62, 4};
  EXPECT_FALSE(ValidateSignature(s, SignatureLimits()).ok());
}

TEST(SignatureLimitsTest, RefusesModelsAboveTheParameterLimit) {
  SignatureLimits limits;
  limits.max_parameters = 100000;
  EXPECT_THAT(ValidateSignature(Mlp(), limits).message(),
              HasSubstr("more than 100000 parameters"));
  limits.max_parameters = 101770;  // Exactly the model.
  EXPECT_TRUE(ValidateSignature(Mlp(), limits).ok());
}

TEST(SignatureLimitsTest, ChunkBytesFollowTheServersLimit) {
  ModelSignature s = Mlp();
  SignatureLimits limits;
  limits.max_chunk_bytes = 1 << 20;
  s.chunk_bytes = (1 << 20) + 4;
  EXPECT_THAT(ValidateSignature(s, limits).message(),
              HasSubstr("] (the server's limit)"));
  s.chunk_bytes = 1 << 20;
  EXPECT_TRUE(ValidateSignature(s, limits).ok());
  s.chunk_bytes = 2;
  EXPECT_FALSE(ValidateSignature(s, limits).ok());
}

TEST(SignatureLimitsTest, RefusesTooManyChunks) {
  ModelSignature s = Mlp();
  s.chunk_bytes = 4;  // One parameter a chunk: 101770 chunks.
  SignatureLimits limits;
  limits.max_chunks = 100000;
  EXPECT_THAT(ValidateSignature(s, limits).message(), HasSubstr("chunks"));
}

// Batch-norm state is allocated like the parameters (a chunk, a barrier),
// so it counts against the same limits: a one-parameter model with 2^40
// state values must not get past registration.
TEST(SignatureLimitsTest, StateTensorsCountAgainstTheLimits) {
  ModelSignature s = Mlp();
  s.state_tensors = {{"bn/moving_mean", {128}}, {"bn/moving_variance", {128}}};
  EXPECT_TRUE(ValidateSignature(s, SignatureLimits()).ok());
  SignatureLimits limits;
  limits.max_parameters = 101770 + 255;  // One short of parameters + state.
  EXPECT_THAT(ValidateSignature(s, limits).message(),
              HasSubstr("parameters and state values"));
  s.state_tensors = {{"bn", {int64_t{1} << 40}}};
  EXPECT_THAT(ValidateSignature(s, SignatureLimits()).message(),
              HasSubstr("(the server's limit)"));
  s.state_tensors = {{"bn", {-3}}};
  EXPECT_THAT(ValidateSignature(s, SignatureLimits()).message(),
              HasSubstr("state tensor 0 has dimension -3"));
  s.state_tensors = {{std::string(5000, 'x'), {3}}};
  EXPECT_FALSE(ValidateSignature(s, SignatureLimits()).ok());
  // State chunks are cut apart from the parameters' and count as chunks.
  s.state_tensors = {{"bn", {1000}}};
  s.chunk_bytes = 4;
  limits = SignatureLimits();
  limits.max_chunks = 101770 + 999;
  EXPECT_THAT(ValidateSignature(s, limits).message(), HasSubstr("chunks"));
  // With shards, ChunkPlan shrinks chunks to the parameters per shard, and
  // the state is cut that fine too: two parameters and 10^6 state values
  // over two shards are a million chunks, not 515.
  s.tensors = {{"w", {2}}};
  s.state_tensors = {{"bn", {1000000}}};
  s.chunk_bytes = 4 << 20;
  s.num_shards = 2;
  EXPECT_THAT(ValidateSignature(s, SignatureLimits()).message(),
              HasSubstr("chunks, at most 65536"));
}

// Chunks keep a few values per worker: many chunks times many workers is
// refused even when each alone is within bounds.
TEST(SignatureLimitsTest, RefusesTooManyChunksTimesWorkers) {
  ModelSignature s = Mlp();
  s.chunk_bytes = 16;   // 25443 chunks.
  s.num_workers = 200;  // 5.1M pairs, past 2^22.
  EXPECT_THAT(ValidateSignature(s, SignatureLimits()).message(),
              HasSubstr("chunks x 200 workers"));
  s.num_workers = 8;
  EXPECT_TRUE(ValidateSignature(s, SignatureLimits()).ok());
}

TEST(SignatureLimitsTest, RefusesOtherNonsense) {
  ModelSignature s = Mlp();
  s.tensors.clear();
  EXPECT_FALSE(ValidateSignature(s, SignatureLimits()).ok());
  s = Mlp();
  s.num_workers = 0;
  EXPECT_FALSE(ValidateSignature(s, SignatureLimits()).ok());
  s = Mlp();
  s.optimizer.learning_rate = std::nan("");
  EXPECT_THAT(ValidateSignature(s, SignatureLimits()).message(),
              HasSubstr("finite"));
  s = Mlp();
  s.optimizer.beta_2 = std::numeric_limits<double>::infinity();
  EXPECT_FALSE(ValidateSignature(s, SignatureLimits()).ok());
  s = Mlp();
  s.tensors[0].name.assign(5000, 'x');
  EXPECT_FALSE(ValidateSignature(s, SignatureLimits()).ok());
  s = Mlp();
  s.tensors[0].shape = {1, 1, 1, 1, 1, 1, 1, 1, 784 * 128};
  EXPECT_THAT(ValidateSignature(s, SignatureLimits()).message(),
              HasSubstr("9 dimensions"));
}

}  // namespace
}  // namespace lockstep
