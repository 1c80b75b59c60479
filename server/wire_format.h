// Reads and writes the tensor-carrying messages of lockstep.v1 directly on
// gRPC byte buffers, so that payloads are never copied into or out of
// protobuf objects: a push's gradient is summed straight from the received
// slices, and a reply's weights are sent straight from the published
// snapshot. The bytes are protobuf's own encoding of PushRequest and of
// PushResponse / PullResponse (which share field numbers); the tests check
// both against the generated classes.
#ifndef LOCKSTEP_SERVER_WIRE_FORMAT_H_
#define LOCKSTEP_SERVER_WIRE_FORMAT_H_

#include <grpcpp/support/byte_buffer.h>
#include <grpcpp/support/slice.h>

#include <cstdint>
#include <memory>
#include <vector>

#include "absl/status/statusor.h"
#include "absl/strings/string_view.h"

namespace lockstep {

// A parsed PushRequest whose payload stays in the received slices.
struct PushView {
  int32_t rank = 0;
  int64_t incarnation = 0;
  int64_t step = 0;
  int32_t chunk = 0;
  int32_t dtype = 0;  // lockstep.v1.DType value.
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

}  // namespace lockstep

#endif  // LOCKSTEP_SERVER_WIRE_FORMAT_H_
