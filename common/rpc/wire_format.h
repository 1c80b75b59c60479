// Reads and writes the tensor-carrying messages of lockstep.v1 directly on
// gRPC byte buffers, so that payloads are never copied into or out of
// protobuf objects: a worker sends its gradient from its own buffer, the
// server sums it straight from the received slices and answers with the
// published snapshot itself, and the worker decodes the weights straight
// from the reply's slices. The bytes are protobuf's own encoding of
// PushRequest and of PushResponse / PullResponse (which share field
// numbers); the tests check both against the generated classes.
#ifndef LOCKSTEP_COMMON_RPC_WIRE_FORMAT_H_
#define LOCKSTEP_COMMON_RPC_WIRE_FORMAT_H_

#include <grpcpp/support/byte_buffer.h>
#include <grpcpp/support/slice.h>

#include <cstdint>
#include <memory>
#include <vector>

#include "absl/status/statusor.h"
#include "absl/strings/string_view.h"
#include "common/rpc/group_membership.h"

namespace lockstep {

// A parsed PushRequest whose payload stays in the received slices.
struct PushView {
  int32_t rank = 0;
  int64_t incarnation = 0;
  int64_t step = 0;
  int32_t chunk = 0;
  int32_t dtype = 0;  // lockstep.v1.DType value.
  int64_t group_generation = 0;
  int32_t batch_shard = 0;
  StepReport report;  // The worker's previous step; step -1: none.
  std::vector<grpc::Slice> slices;      // Keep `data` alive.
  std::vector<absl::string_view> data;  // The payload, in pieces.
};

// INVALID_ARGUMENT for bytes that are not a well-formed PushRequest.
absl::StatusOr<PushView> ParsePushRequest(const grpc::ByteBuffer& buffer);

// A PushResponse / PullResponse whose data field is `payload`, referenced in
// place; `owner` keeps the payload alive until gRPC has sent it.
grpc::ByteBuffer MakeWeightsReply(int64_t version, int32_t chunk,
                                  int32_t dtype, absl::string_view payload,
                                  std::shared_ptr<const void> owner);

// A PushRequest whose data field refers to `payload` without owning it: the
// caller keeps it alive and unchanged until the call completes. `slot`'s
// group fields are written when its generation is not 0, its report when
// the report's step is not -1.
grpc::ByteBuffer MakePushRequest(int32_t rank, int64_t incarnation,
                                 int64_t step, int32_t chunk, int32_t dtype,
                                 absl::string_view payload,
                                 const PushSlot& slot = {});

// A parsed PushResponse / PullResponse whose payload stays in the slices.
struct WeightsView {
  int64_t version = 0;
  int32_t chunk = 0;
  int32_t dtype = 0;
  std::vector<grpc::Slice> slices;
  std::vector<absl::string_view> data;
};

absl::StatusOr<WeightsView> ParseWeightsReply(const grpc::ByteBuffer& buffer);

}  // namespace lockstep

#endif  // LOCKSTEP_COMMON_RPC_WIRE_FORMAT_H_
