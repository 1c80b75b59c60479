#include "common/rpc/wire_format.h"

#include <string>
#include <vector>

#include "gmock/gmock.h"
#include "gtest/gtest.h"
#include "lockstep/v1/lockstep.pb.h"

namespace lockstep {
namespace {

// `bytes` as a byte buffer of slices cut at the given offsets.
grpc::ByteBuffer Split(const std::string& bytes, std::vector<size_t> cuts) {
  std::vector<grpc::Slice> slices;
  size_t start = 0;
  cuts.push_back(bytes.size());
  for (size_t cut : cuts) {
    slices.emplace_back(bytes.data() + start, cut - start);
    start = cut;
  }
  return grpc::ByteBuffer(slices.data(), slices.size());
}

std::string Joined(const std::vector<absl::string_view>& pieces) {
  std::string out;
  for (absl::string_view p : pieces) out.append(p.data(), p.size());
  return out;
}

TEST(WireFormatTest, ParsesWhatProtobufWritesAtAnySliceBoundary) {
  v1::PushRequest request;
  request.set_rank(3);
  request.set_incarnation(1234567890123);
  request.set_step(-2);  // Negative values travel as 10-byte varints.
  request.set_chunk(7);
  request.set_dtype(v1::DTYPE_BFLOAT16);
  std::string payload;
  for (int i = 0; i < 300; ++i) payload.push_back(static_cast<char>(i * 7));
  request.set_data(payload);
  const std::string bytes = request.SerializeAsString();
  for (size_t a = 0; a <= bytes.size(); a += 5) {
    for (size_t b = a; b <= bytes.size(); b += 37) {
      absl::StatusOr<PushView> view = ParsePushRequest(Split(bytes, {a, b}));
      ASSERT_TRUE(view.ok()) << view.status() << " at " << a << "," << b;
      EXPECT_EQ(view->rank, 3);
      EXPECT_EQ(view->incarnation, 1234567890123);
      EXPECT_EQ(view->step, -2);
      EXPECT_EQ(view->chunk, 7);
      EXPECT_EQ(view->dtype, v1::DTYPE_BFLOAT16);
      ASSERT_EQ(Joined(view->data), payload);
    }
  }
}

TEST(WireFormatTest, SkipsUnknownFieldsAndKeepsDefaults) {
  v1::PushRequest request;
  request.set_chunk(2);
  std::string bytes = request.SerializeAsString();
  // Field 15 as varint, fixed32, fixed64 and a length-delimited string.
  bytes += std::string("\x78\x05", 2);
  bytes += std::string("\x7d\x01\x02\x03\x04", 5);
  bytes += std::string("\x79\x01\x02\x03\x04\x05\x06\x07\x08", 9);
  bytes += std::string("\x7a\x03xyz", 5);
  absl::StatusOr<PushView> view = ParsePushRequest(Split(bytes, {}));
  ASSERT_TRUE(view.ok()) << view.status();
  EXPECT_EQ(view->chunk, 2);
  EXPECT_EQ(view->rank, 0);
  EXPECT_TRUE(view->data.empty());
}

TEST(WireFormatTest, RejectsMalformedBytes) {
  v1::PushRequest request;
  request.set_data(std::string(100, 'x'));
  const std::string bytes = request.SerializeAsString();
  const std::vector<std::string> bad = {
      bytes.substr(0, bytes.size() - 1),       // Truncated payload.
      std::string("\x08", 1),                  // Truncated varint.
      std::string("\x08\xff\xff\xff\xff\xff\xff\xff\xff\xff\xff\x01", 12),
      std::string("\x0b", 1),                  // Wire type 3 (groups).
  };
  for (const std::string& b : bad) {
    absl::StatusOr<PushView> view = ParsePushRequest(Split(b, {}));
    EXPECT_EQ(view.status().code(), absl::StatusCode::kInvalidArgument);
  }
}

TEST(WireFormatTest, ReplyIsAProtobufPushResponseSharingThePayload) {
  auto values = std::make_shared<std::vector<float>>(
      std::vector<float>{1.5f, -2.0f, 3.25f});
  const absl::string_view payload(
      reinterpret_cast<const char*>(values->data()), 12);
  {
    grpc::ByteBuffer reply = MakeWeightsReply(42, 5, v1::DTYPE_FLOAT32,
                                              payload, values);
    EXPECT_EQ(values.use_count(), 2) << "the reply holds a reference";
    grpc::Slice joined;
    ASSERT_TRUE(reply.DumpToSingleSlice(&joined).ok());
    v1::PushResponse parsed;
    ASSERT_TRUE(parsed.ParseFromArray(joined.begin(),
                                      static_cast<int>(joined.size())));
    EXPECT_EQ(parsed.version(), 42);
    EXPECT_EQ(parsed.chunk(), 5);
    EXPECT_EQ(parsed.dtype(), v1::DTYPE_FLOAT32);
    EXPECT_EQ(parsed.data(), std::string(payload));
    v1::PullResponse pull;  // Same field numbers.
    ASSERT_TRUE(pull.ParseFromArray(joined.begin(),
                                    static_cast<int>(joined.size())));
    EXPECT_EQ(pull.version(), 42);
  }
  EXPECT_EQ(values.use_count(), 1) << "released once gRPC lets go";
  // Version 0 and an empty payload: proto3 defaults are left out.
  grpc::ByteBuffer empty = MakeWeightsReply(0, 0, 0, "", nullptr);
  grpc::Slice joined;
  ASSERT_TRUE(empty.DumpToSingleSlice(&joined).ok());
  EXPECT_EQ(joined.size(), 0u);
}

TEST(WireFormatTest, PushRequestIsProtobufAndRepliesParseAtAnyBoundary) {
  const std::string payload = "0123456789abcdef";
  grpc::ByteBuffer request =
      MakePushRequest(-1, 99, 12, 3, v1::DTYPE_FLOAT16, payload);
  grpc::Slice joined;
  ASSERT_TRUE(request.DumpToSingleSlice(&joined).ok());
  v1::PushRequest parsed;
  ASSERT_TRUE(parsed.ParseFromArray(joined.begin(),
                                    static_cast<int>(joined.size())));
  EXPECT_EQ(parsed.rank(), -1);
  EXPECT_EQ(parsed.incarnation(), 99);
  EXPECT_EQ(parsed.step(), 12);
  EXPECT_EQ(parsed.chunk(), 3);
  EXPECT_EQ(parsed.dtype(), v1::DTYPE_FLOAT16);
  EXPECT_EQ(parsed.data(), payload);
  EXPECT_EQ(parsed.group_generation(), 0) << "not written without a group";

  // An elastic job's push: its group generation and batch shard, both ways.
  grpc::ByteBuffer elastic =
      MakePushRequest(1, 99, 12, 3, v1::DTYPE_FLOAT32, payload, PushSlot{5, 2});
  ASSERT_TRUE(elastic.DumpToSingleSlice(&joined).ok());
  ASSERT_TRUE(
      parsed.ParseFromArray(joined.begin(), static_cast<int>(joined.size())));
  EXPECT_EQ(parsed.group_generation(), 5);
  EXPECT_EQ(parsed.batch_shard(), 2);
  EXPECT_EQ(parsed.data(), payload);
  absl::StatusOr<PushView> view = ParsePushRequest(elastic);
  ASSERT_TRUE(view.ok()) << view.status();
  EXPECT_EQ(view->group_generation, 5);
  EXPECT_EQ(view->batch_shard, 2);
  EXPECT_EQ(view->rank, 1);
  EXPECT_EQ(view->report.step, -1) << "no report written, none read";

  // The worker's report of its step 0 (report_step is the step + 1, so
  // step 0 is told from none); a negative duration goes as 0.
  PushSlot reported;
  reported.report = StepReport{0, 1500, 20000, -7, 300};
  grpc::ByteBuffer with_report =
      MakePushRequest(1, 99, 1, 3, v1::DTYPE_FLOAT32, payload, reported);
  ASSERT_TRUE(with_report.DumpToSingleSlice(&joined).ok());
  ASSERT_TRUE(
      parsed.ParseFromArray(joined.begin(), static_cast<int>(joined.size())));
  EXPECT_EQ(parsed.report_step(), 1);
  EXPECT_EQ(parsed.report_input_us(), 1500);
  EXPECT_EQ(parsed.report_compute_us(), 20000);
  EXPECT_EQ(parsed.report_push_us(), 0);
  EXPECT_EQ(parsed.report_wait_us(), 300);
  EXPECT_EQ(parsed.group_generation(), 0);
  view = ParsePushRequest(with_report);
  ASSERT_TRUE(view.ok()) << view.status();
  EXPECT_EQ(view->report.step, 0);
  EXPECT_EQ(view->report.input_us, 1500);
  EXPECT_EQ(view->report.compute_us, 20000);
  EXPECT_EQ(view->report.push_us, 0);
  EXPECT_EQ(view->report.wait_us, 300);

  v1::PullResponse reply;
  reply.set_version(8);
  reply.set_chunk(4);
  reply.set_dtype(v1::DTYPE_BFLOAT16);
  reply.set_data(std::string(1000, 'w'));
  const std::string bytes = reply.SerializeAsString();
  for (size_t cut = 0; cut <= bytes.size(); cut += 13) {
    absl::StatusOr<WeightsView> view = ParseWeightsReply(Split(bytes, {cut}));
    ASSERT_TRUE(view.ok()) << view.status();
    EXPECT_EQ(view->version, 8);
    EXPECT_EQ(view->chunk, 4);
    EXPECT_EQ(view->dtype, v1::DTYPE_BFLOAT16);
    EXPECT_EQ(Joined(view->data), std::string(1000, 'w'));
  }
  EXPECT_FALSE(ParseWeightsReply(Split(bytes.substr(0, 20), {})).ok());
}

}  // namespace
}  // namespace lockstep
