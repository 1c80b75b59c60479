// The model signature as the lockstep.v1 message (common/model/signature_proto.h):
// what a worker sends and a checkpoint's header holds.
#include "common/model/signature_proto.h"

#include <string>

#include "absl/status/status.h"
#include "gmock/gmock.h"
#include "gtest/gtest.h"
#include "lockstep/v1/lockstep.pb.h"
#include "tests/unit/model_signature_test_util.h"

namespace lockstep {
namespace {

using ::testing::ElementsAre;
using ::testing::HasSubstr;
using ::testing::IsEmpty;

TEST(SignatureProtoTest, RoundTripThroughTheWire) {
  ModelSignature original = Mlp();
  original.tensors.push_back({"scalar", {}});
  original.optimizer = OptimizerConfig::Defaults("momentum");
  original.optimizer.nesterov = true;
  original.optimizer.learning_rate = 0.0375;
  original.optimizer.beta_1 = 0.8;
  original.optimizer.beta_2 = 0.99;
  original.optimizer.epsilon = 1e-5;
  original.optimizer.weight_decay = 0.125;
  original.chunk_bytes = 65540;
  original.num_workers = 5;

  v1::ModelSignature proto;
  proto.set_num_workers(99);  // Stale contents are replaced.
  proto.add_tensors()->set_name("stale");
  SignatureToProto(original, &proto);
  ASSERT_EQ(proto.tensors_size(), 5);
  EXPECT_EQ(proto.tensors(0).name(), "dense/kernel");
  EXPECT_THAT(proto.tensors(0).shape(), ElementsAre(784, 128));
  EXPECT_EQ(proto.tensors(0).dtype(), v1::DTYPE_FLOAT32);
  EXPECT_EQ(proto.num_workers(), 5);

  v1::ModelSignature parsed;
  ASSERT_TRUE(parsed.ParseFromString(proto.SerializeAsString()));
  const absl::StatusOr<ModelSignature> read = SignatureFromProto(parsed);
  ASSERT_TRUE(read.ok()) << read.status();
  const ModelSignature& back = *read;

  EXPECT_EQ(DescribeDifference(original, back), "");
  EXPECT_EQ(back.tensors, original.tensors);
  EXPECT_TRUE(back.optimizer == original.optimizer);
  EXPECT_EQ(back.optimizer.learning_rate, 0.0375);
  EXPECT_TRUE(back.optimizer.nesterov);
  EXPECT_EQ(back.chunk_bytes, 65540);
  EXPECT_EQ(back.num_workers, 5);
}

TEST(SignatureProtoTest, DefaultSignatureRoundTrips) {
  v1::ModelSignature proto;
  SignatureToProto(ModelSignature(), &proto);
  const absl::StatusOr<ModelSignature> back = SignatureFromProto(proto);
  ASSERT_TRUE(back.ok()) << back.status();
  EXPECT_EQ(DescribeDifference(ModelSignature(), *back), "");
  EXPECT_THAT(back->tensors, IsEmpty());
}

// The one place a mode's name is read: every name round-trips, an empty
// one is sync (signatures from before names), anything else is refused
// rather than read as sync.
TEST(SignatureProtoTest, SyncModesAreReadOrRefused) {
  for (SyncMode mode : {SyncMode::kSync, SyncMode::kAsync, SyncMode::kSsp}) {
    absl::StatusOr<SyncMode> read = ParseSyncMode(SyncModeName(mode));
    ASSERT_TRUE(read.ok()) << read.status();
    EXPECT_EQ(*read, mode);
  }
  EXPECT_EQ(*ParseSyncMode(""), SyncMode::kSync);
  // All-reduce is a worker's mode; its signature says sync.
  EXPECT_STREQ(SyncModeName(SyncMode::kAllReduce), "allreduce");
  EXPECT_EQ(ParseSyncMode("allreduce").status().code(),
            absl::StatusCode::kInvalidArgument);
  v1::ModelSignature proto;
  SignatureToProto(ModelSignature(), &proto);
  proto.mutable_sync()->set_mode("asynchronous");
  const absl::StatusOr<ModelSignature> refused = SignatureFromProto(proto);
  EXPECT_EQ(refused.status().code(), absl::StatusCode::kInvalidArgument);
  EXPECT_THAT(std::string(refused.status().message()),
              HasSubstr("unknown sync mode \"asynchronous\""));
}

// The mode travels as an enum and, for older readers, by name; a message
// from an older sender has only the name.
TEST(SignatureProtoTest, SyncModeTravelsAsKindAndName) {
  const struct {
    SyncMode mode;
    v1::SyncMode kind;
    const char* name;
  } cases[] = {{SyncMode::kSync, v1::SYNC_MODE_SYNC, "sync"},
               {SyncMode::kAsync, v1::SYNC_MODE_ASYNC, "async"},
               {SyncMode::kSsp, v1::SYNC_MODE_SSP, "ssp"}};
  for (const auto& c : cases) {
    SCOPED_TRACE(c.name);
    ModelSignature signature;
    signature.sync.mode = c.mode;
    v1::ModelSignature proto;
    SignatureToProto(signature, &proto);
    EXPECT_EQ(proto.sync().kind(), c.kind);
    EXPECT_EQ(proto.sync().mode(), c.name);
    absl::StatusOr<ModelSignature> read = SignatureFromProto(proto);
    ASSERT_TRUE(read.ok()) << read.status();
    EXPECT_EQ(read->sync.mode, c.mode);

    proto.mutable_sync()->clear_kind();  // An older sender.
    read = SignatureFromProto(proto);
    ASSERT_TRUE(read.ok()) << read.status();
    EXPECT_EQ(read->sync.mode, c.mode);

    proto.mutable_sync()->set_kind(c.kind);  // A sender that writes no name.
    proto.mutable_sync()->clear_mode();
    read = SignatureFromProto(proto);
    ASSERT_TRUE(read.ok()) << read.status();
    EXPECT_EQ(read->sync.mode, c.mode);
  }
  v1::ModelSignature proto;
  SignatureToProto(ModelSignature(), &proto);
  proto.mutable_sync()->set_kind(v1::SYNC_MODE_ASYNC);  // Name says "sync".
  absl::StatusOr<ModelSignature> refused = SignatureFromProto(proto);
  EXPECT_EQ(refused.status().code(), absl::StatusCode::kInvalidArgument);
  EXPECT_THAT(std::string(refused.status().message()),
              HasSubstr("sync mode \"sync\" disagrees with kind async"));
  proto.mutable_sync()->set_kind(static_cast<v1::SyncMode>(9));
  proto.mutable_sync()->clear_mode();
  refused = SignatureFromProto(proto);
  EXPECT_EQ(refused.status().code(), absl::StatusCode::kInvalidArgument);
  EXPECT_THAT(std::string(refused.status().message()),
              HasSubstr("unknown sync mode kind 9"));
}

// LocalSGD and DiLoCo: the rounds and the inner optimizer travel; a
// synchronous signature writes neither, so its bytes are those older
// readers know.
TEST(SignatureProtoTest, LocalStepsAndTheInnerOptimizerRoundTrip) {
  ModelSignature original = Mlp();
  v1::ModelSignature proto;
  SignatureToProto(original, &proto);
  EXPECT_FALSE(proto.has_inner_optimizer());
  EXPECT_EQ(proto.sync().local_steps(), 0);

  original.sync.local_steps = 50;
  original.inner_optimizer = OptimizerConfig::Defaults("adamw");
  original.inner_optimizer.learning_rate = 0.0025;
  SignatureToProto(original, &proto);
  EXPECT_EQ(proto.sync().local_steps(), 50);
  EXPECT_EQ(proto.inner_optimizer().name(), "adamw");
  absl::StatusOr<ModelSignature> read = SignatureFromProto(proto);
  ASSERT_TRUE(read.ok()) << read.status();
  EXPECT_EQ(read->sync.local_steps, 50);
  EXPECT_TRUE(read->inner_optimizer == original.inner_optimizer);
  EXPECT_EQ(DescribeDifference(original, *read), "");

  ModelSignature other = original;
  other.inner_optimizer.learning_rate = 0.005;
  EXPECT_THAT(DescribeDifference(original, other),
              HasSubstr("inner optimizer: job has adamw(lr=0.0025"));
  other = original;
  other.sync.local_steps = 10;
  EXPECT_THAT(DescribeDifference(original, other),
              HasSubstr("local_steps=50), worker has sync (backup_workers=0 "
                        "staleness=0 local_steps=10)"));
}

// Every schedule setting crosses the wire; the constant rate is the absent
// message, which is also what a sender from before schedules writes.
TEST(SignatureProtoTest, LearningRateScheduleRoundTrips) {
  ModelSignature original = Mlp();
  LrSchedule& s = original.optimizer.schedule;
  s.kind = "piecewise";
  s.boundaries = {10, 20};
  s.values = {0.5, 0.25, 0.125};
  s.warmup_steps = 3;
  s.warmup_from = 0.0625;
  v1::ModelSignature proto;
  SignatureToProto(original, &proto);
  EXPECT_EQ(proto.optimizer().schedule().kind(), "piecewise");
  EXPECT_THAT(proto.optimizer().schedule().values(),
              ElementsAre(0.5, 0.25, 0.125));
  absl::StatusOr<ModelSignature> read = SignatureFromProto(proto);
  ASSERT_TRUE(read.ok()) << read.status();
  EXPECT_TRUE(read->optimizer.schedule == s);
  EXPECT_EQ(DescribeDifference(original, *read), "");

  s = LrSchedule();
  s.kind = "exponential";
  s.decay_steps = 7;
  s.decay_rate = 0.75;
  s.staircase = true;
  SignatureToProto(original, &proto);
  read = SignatureFromProto(proto);
  ASSERT_TRUE(read.ok()) << read.status();
  EXPECT_TRUE(read->optimizer.schedule == s);
  s = LrSchedule();
  s.kind = "cosine";
  s.decay_steps = 9;
  s.alpha = 0.25;
  SignatureToProto(original, &proto);
  read = SignatureFromProto(proto);
  ASSERT_TRUE(read.ok()) << read.status();
  EXPECT_TRUE(read->optimizer.schedule == s);

  original.optimizer.schedule = LrSchedule();
  SignatureToProto(original, &proto);
  EXPECT_FALSE(proto.optimizer().has_schedule());
  read = SignatureFromProto(proto);
  ASSERT_TRUE(read.ok()) << read.status();
  EXPECT_EQ(read->optimizer.schedule.kind, "constant");
  EXPECT_EQ(DescribeDifference(original, *read), "");
}

}  // namespace
}  // namespace lockstep
