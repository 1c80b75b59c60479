// libFuzzer target: DecodeCheckpoint (server/core/checkpoint.h) on arbitrary
// bytes, and the round trip of whatever it accepts. Checksums would stop
// almost every mutation at the door, so inputs whose first byte is odd are
// read as [4-byte header length][CheckpointHeader][data] and given correct
// checksums (the header's, and each tensor's over the bytes it names)
// before decoding; the rest go in as they are.
#include <google/protobuf/stubs/logging.h>
#include <zlib.h>

#include <cstddef>
#include <cstdint>
#include <cstring>
#include <string>

#include "lockstep/v1/lockstep.pb.h"
#include "server/core/checkpoint.h"

namespace {

uint32_t Crc(const char* p, size_t n) {
  return static_cast<uint32_t>(crc32(crc32(0L, Z_NULL, 0),
                                     reinterpret_cast<const Bytef*>(p),
                                     static_cast<uInt>(n)));
}

template <typename T>
void Append(T value, std::string* out) {
  out->append(reinterpret_cast<const char*>(&value), sizeof(T));
}

// A file with valid checksums around the fuzzer's header and data.
std::string WithChecksums(const uint8_t* data, size_t size) {
  uint32_t header_size = 0;
  if (size >= 4) std::memcpy(&header_size, data, 4);
  data += std::min<size_t>(size, 4);
  size -= std::min<size_t>(size, 4);
  header_size = std::min<uint32_t>(header_size, static_cast<uint32_t>(size));
  std::string header(reinterpret_cast<const char*>(data), header_size);
  const std::string body(reinterpret_cast<const char*>(data) + header_size,
                         size - header_size);
  lockstep::v1::CheckpointHeader proto;
  if (proto.ParseFromString(header)) {
    for (lockstep::v1::CheckpointTensor& t : *proto.mutable_tensors()) {
      const uint64_t offset = static_cast<uint64_t>(t.offset());
      const uint64_t elements = static_cast<uint64_t>(t.elements());
      if (t.offset() >= 0 && t.elements() >= 0 && offset <= body.size() &&
          elements <= (body.size() - offset) / 4) {
        t.set_crc32(Crc(body.data() + offset, elements * 4));
      }
    }
    header = proto.SerializeAsString();
  }
  std::string file("LSCKPT\n\0", 8);
  Append<uint32_t>(lockstep::kCheckpointFormatVersion, &file);
  Append<uint64_t>(header.size(), &file);
  Append<uint32_t>(Crc(header.data(), header.size()), &file);
  return file + header + body;
}

}  // namespace

// Protobuf logs every string field that is not UTF-8; fuzzing makes many.
extern "C" int LLVMFuzzerInitialize(int* argc, char*** argv) {
  google::protobuf::SetLogHandler(nullptr);
  return 0;
}

extern "C" int LLVMFuzzerTestOneInput(const uint8_t* data, size_t size) {
  if (size == 0) return 0;
  const std::string bytes =
      (data[0] & 1) != 0
          ? WithChecksums(data + 1, size - 1)
          : std::string(reinterpret_cast<const char*>(data) + 1, size - 1);
  absl::StatusOr<lockstep::ShardCheckpoint> checkpoint =
      lockstep::DecodeCheckpoint(bytes);
  if (!checkpoint.ok()) return 0;
  // What decodes re-encodes to something that decodes the same way.
  absl::StatusOr<lockstep::ShardCheckpoint> again =
      lockstep::DecodeCheckpoint(lockstep::EncodeCheckpoint(*checkpoint));
  if (!again.ok() || again->chunks.size() != checkpoint->chunks.size() ||
      again->version != checkpoint->version) {
    __builtin_trap();
  }
  (void)checkpoint->signature.NumParameters();
  return 0;
}
