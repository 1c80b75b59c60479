// Regression tests for what fuzzing and review found in the parsers: each
// input here once crashed a server, read undefined memory or was accepted
// where protobuf refuses it.
#include <grpcpp/support/byte_buffer.h>
#include <grpcpp/support/slice.h>
#include <zlib.h>

#include <cstdint>
#include <string>

#include "common/rpc/wire_format.h"
#include "gmock/gmock.h"
#include "gtest/gtest.h"
#include "lockstep/v1/lockstep.pb.h"
#include "server/core/checkpoint.h"

namespace lockstep {
namespace {

using ::testing::HasSubstr;

template <typename T>
void Append(T value, std::string* out) {
  out->append(reinterpret_cast<const char*>(&value), sizeof(T));
}

// A checkpoint file around `header` and `data` with correct checksums.
std::string File(const v1::CheckpointHeader& header, const std::string& data) {
  const std::string h = header.SerializeAsString();
  std::string file("LSCKPT\n\0", 8);
  Append<uint32_t>(kCheckpointFormatVersion, &file);
  Append<uint64_t>(h.size(), &file);
  Append<uint32_t>(
      static_cast<uint32_t>(crc32(0, reinterpret_cast<const Bytef*>(h.data()),
                                  static_cast<uInt>(h.size()))),
      &file);
  return file + h + data;
}

v1::CheckpointHeader Header() {
  v1::CheckpointHeader header;
  v1::TensorSpec* t = header.mutable_signature()->add_tensors();
  t->set_name("w");
  t->add_shape(4);
  header.mutable_signature()->set_chunk_bytes(16);
  header.mutable_signature()->set_num_workers(1);
  header.set_num_shards(1);
  header.set_num_workers(1);
  return header;
}

TEST(HostileCheckpointTest, ElementCountThatWrapsIsCorruptNotACrash) {
  // 2^62 elements * 4 bytes wraps to 0 in 64 bits; the decoder once
  // compared the wrapped size with the file, then allocated 2^62 floats
  // (std::length_error: the server aborted while restoring).
  v1::CheckpointHeader header = Header();
  v1::CheckpointTensor* t = header.add_tensors();
  t->set_name("weights");
  t->set_elements(int64_t{1} << 62);
  t->set_crc32(0);  // The CRC of no bytes.
  absl::StatusOr<ShardCheckpoint> decoded = DecodeCheckpoint(File(header, ""));
  EXPECT_EQ(decoded.status().code(), absl::StatusCode::kDataLoss);
  EXPECT_THAT(decoded.status().message(), HasSubstr("past the end"));
}

TEST(HostileCheckpointTest, ShapesThatOverflowAreCorrupt) {
  v1::CheckpointHeader header = Header();
  v1::TensorSpec* t = header.mutable_signature()->mutable_tensors(0);
  t->clear_shape();
  t->add_shape(int64_t{1} << 40);
  t->add_shape(int64_t{1} << 40);
  EXPECT_EQ(DecodeCheckpoint(File(header, "")).status().code(),
            absl::StatusCode::kDataLoss);
  t->set_shape(1, -1);
  EXPECT_EQ(DecodeCheckpoint(File(header, "")).status().code(),
            absl::StatusCode::kDataLoss);
}

TEST(HostileCheckpointTest, EmptyTensorDecodes) {
  // Found by UBSan under the fuzzer: memcpy to an empty vector's null data.
  v1::CheckpointHeader header = Header();
  v1::CheckpointTensor* t = header.add_tensors();
  t->set_name("weights");
  t->set_elements(0);
  absl::StatusOr<ShardCheckpoint> decoded = DecodeCheckpoint(File(header, ""));
  ASSERT_TRUE(decoded.ok()) << decoded.status();
  ASSERT_EQ(decoded->chunks.size(), 1u);
  EXPECT_TRUE(decoded->chunks[0].weights.empty());
}

grpc::ByteBuffer Buffer(const std::string& bytes) {
  grpc::Slice slice(bytes);
  return grpc::ByteBuffer(&slice, 1);
}

TEST(HostileWireTest, ParsesWhatProtobufParsesAndNothingElse) {
  // Found by the differential fuzzer: keys and lengths longer than 5 bytes,
  // and field number 0, which protobuf refuses.
  const std::string cases[] = {
      std::string("\xcd\xfe\xcd\xf9\x81\x00\x00\x00\x00\x0a", 10),
      std::string("\x00\x01", 2),
      std::string("\x32\x80\x80\x80\x80\x80\x00", 7),
      std::string("\x32\xff\xff\xff\xff\x0f", 6),  // 4 GiB of payload.
      std::string("\x08\xff\xff\xff\xff\xff\xff\xff\xff\xff\xff\x01", 12),
  };
  for (const std::string& bytes : cases) {
    v1::PushRequest proto;
    EXPECT_FALSE(proto.ParseFromString(bytes));
    absl::StatusOr<PushView> push = ParsePushRequest(Buffer(bytes));
    EXPECT_EQ(push.status().code(), absl::StatusCode::kInvalidArgument);
  }
  // And a good one still parses, across slices.
  v1::PushRequest good;
  good.set_rank(1);
  good.set_step(7);
  good.set_data(std::string(8, '\x01'));
  const std::string bytes = good.SerializeAsString();
  grpc::Slice pieces[2] = {grpc::Slice(bytes.substr(0, 5)),
                           grpc::Slice(bytes.substr(5))};
  absl::StatusOr<PushView> push = ParsePushRequest(grpc::ByteBuffer(pieces, 2));
  ASSERT_TRUE(push.ok()) << push.status();
  EXPECT_EQ(push->rank, 1);
  EXPECT_EQ(push->step, 7);
}

}  // namespace
}  // namespace lockstep
