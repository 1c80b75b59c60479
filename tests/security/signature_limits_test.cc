#include "common/signature_limits.h"

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
  EXPECT_THAT(status.message(), HasSubstr("--max_parameters"));
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
              HasSubstr("--max_chunk_bytes"));
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
