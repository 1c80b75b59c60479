// libFuzzer target: the raw wire parsers (common/rpc/wire_format.h) on
// arbitrary bytes cut into arbitrary slices, checked against protobuf's own
// parser, and the pushes they accept fed to a real ParameterServer core
// (its request validation: ranks, steps, chunk indexes, sizes, NaN).
#include <google/protobuf/stubs/logging.h>
#include <grpcpp/support/byte_buffer.h>
#include <grpcpp/support/slice.h>

#include <cstddef>
#include <cstdint>
#include <memory>
#include <string>
#include <vector>

#include "common/model/model_signature.h"
#include "common/rpc/wire_format.h"
#include "common/wire/wire_codec.h"
#include "lockstep/v1/lockstep.pb.h"
#include "server/core/parameter_server.h"

namespace {

using lockstep::WireDType;

// A two-worker job of a 19-parameter model in chunks of 4 values, both
// ranks registered and version 0 published, so that pushes reach the
// barrier. Made afresh every 4096 inputs: waiting pushes keep their
// callbacks, which would otherwise pile up over a long run.
lockstep::ParameterServer* Core() {
  static std::unique_ptr<lockstep::ParameterServer> core;
  static int uses = 0;
  if (core == nullptr || ++uses % 4096 == 0) {
    lockstep::ParameterServerOptions options;
    options.num_workers = 2;
    core = *lockstep::ParameterServer::Create(options);
    lockstep::ModelSignature s;
    s.tensors = {{"kernel", {4, 4}}, {"bias", {3}}};
    s.num_workers = 2;
    s.chunk_bytes = 16;
    absl::StatusOr<lockstep::Registration> reg0 = core->Register(0, s);
    (void)core->Register(1, s);
    const std::vector<float> weights(4, 0.5f);
    for (int chunk = 0; chunk < 5; ++chunk) {
      const size_t n = chunk == 4 ? 3 : 4;
      (void)core->Initialize(
          0, reg0->incarnation, chunk,
          absl::string_view(reinterpret_cast<const char*>(weights.data()),
                            n * sizeof(float)));
    }
  }
  return core.get();
}

grpc::ByteBuffer Slices(const uint8_t* data, size_t size, uint8_t cut) {
  std::vector<grpc::Slice> slices;
  const size_t step = 1 + cut % 7;
  for (size_t i = 0; i < size; i += step) {
    slices.emplace_back(data + i, std::min(step, size - i));
  }
  if (slices.empty()) return grpc::ByteBuffer();
  return grpc::ByteBuffer(slices.data(), slices.size());
}

}  // namespace

// Protobuf logs every string field that is not UTF-8; fuzzing makes many.
extern "C" int LLVMFuzzerInitialize(int* argc, char*** argv) {
  google::protobuf::SetLogHandler(nullptr);
  return 0;
}

extern "C" int LLVMFuzzerTestOneInput(const uint8_t* data, size_t size) {
  if (size == 0) return 0;
  const uint8_t cut = data[0];
  ++data;
  --size;
  const std::string flat(reinterpret_cast<const char*>(data), size);
  const grpc::ByteBuffer buffer = Slices(data, size, cut);

  absl::StatusOr<lockstep::PushView> push = lockstep::ParsePushRequest(buffer);
  if (push.ok()) {
    // Protobuf reads the same bytes the same way.
    lockstep::v1::PushRequest proto;
    if (!proto.ParseFromString(flat) || proto.rank() != push->rank ||
        proto.incarnation() != push->incarnation ||
        proto.step() != push->step || proto.chunk() != push->chunk ||
        static_cast<int32_t>(proto.dtype()) != push->dtype) {
      __builtin_trap();
    }
    std::string payload;
    for (absl::string_view piece : push->data) {
      payload.append(piece.data(), piece.size());
    }
    if (payload != proto.data()) __builtin_trap();
    if (push->dtype >= 0 && push->dtype <= 3) {
      const WireDType dtype = push->dtype == 2   ? WireDType::kBfloat16
                              : push->dtype == 3 ? WireDType::kFloat16
                                                 : WireDType::kFloat32;
      (void)lockstep::CheckFinitePieces(push->data, dtype);
      Core()->Push(push->rank, push->incarnation, push->step, push->chunk,
                   dtype, push->data,
                   [](absl::StatusOr<lockstep::ChunkSnapshot>) {});
    }
  }

  absl::StatusOr<lockstep::WeightsView> reply =
      lockstep::ParseWeightsReply(buffer);
  if (reply.ok()) {
    lockstep::v1::PushResponse proto;
    if (!proto.ParseFromString(flat) || proto.version() != reply->version ||
        proto.chunk() != reply->chunk) {
      __builtin_trap();
    }
    size_t bytes = 0;
    for (absl::string_view piece : reply->data) bytes += piece.size();
    if (bytes % 4 == 0 && bytes <= (1 << 20)) {
      std::vector<float> out(bytes / 4);
      if (!lockstep::DecodePieces(reply->data, WireDType::kFloat32,
                                  absl::MakeSpan(out))
               .ok()) {
        __builtin_trap();
      }
    }
  }
  return 0;
}
