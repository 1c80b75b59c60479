// Checkpoints' file format (declared in checkpoint.h): EncodeCheckpoint and
// DecodeCheckpoint. checkpoint_store.cc keeps the files.
#include "server/core/checkpoint.h"

#include <zlib.h>

#include <algorithm>
#include <climits>
#include <cstring>
#include <string>
#include <utility>
#include <vector>

#include "absl/strings/str_cat.h"
#include "absl/time/time.h"
#include "common/base/status_macros.h"
#include "common/model/signature_proto.h"
#include "lockstep/v1/lockstep.pb.h"

namespace lockstep {
namespace {

constexpr char kMagic[8] = {'L', 'S', 'C', 'K', 'P', 'T', '\n', '\0'};
constexpr size_t kPreamble = 8 + 4 + 8 + 4;  // magic, format, length, crc.
// More parameters than this in a checkpoint's signature is damage: 2^50
// fp32 values would be 4 PiB.
constexpr int64_t kMaxCheckpointParameters = int64_t{1} << 50;

uint32_t Crc32(const void* data, size_t size) {
  uLong crc = crc32(0L, Z_NULL, 0);
  const Bytef* p = static_cast<const Bytef*>(data);
  // zlib takes uInt lengths: feed large buffers in pieces.
  while (size > 0) {
    const uInt n = static_cast<uInt>(std::min<size_t>(size, 1u << 30));
    crc = crc32(crc, p, n);
    p += n;
    size -= n;
  }
  return static_cast<uint32_t>(crc);
}

template <typename T>
void AppendLittleEndian(T value, std::string* out) {
  char bytes[sizeof(T)];
  std::memcpy(bytes, &value, sizeof(T));  // Hosts are little-endian.
  out->append(bytes, sizeof(T));
}

template <typename T>
T ReadLittleEndian(const char* p) {
  T value;
  std::memcpy(&value, p, sizeof(T));
  return value;
}

absl::Status Corrupt(absl::string_view what) {
  return absl::DataLossError(absl::StrCat("corrupt checkpoint: ", what));
}

}  // namespace

std::string EncodeCheckpoint(const ShardCheckpoint& checkpoint,
                             absl::Time written) {
  v1::CheckpointHeader header;
  SignatureToProto(checkpoint.signature, header.mutable_signature());
  header.set_shard(checkpoint.shard);
  header.set_num_shards(checkpoint.num_shards);
  header.set_num_workers(checkpoint.num_workers);
  header.set_version(checkpoint.version);
  header.set_written_unix_micros(absl::ToUnixMicros(written));
  std::string data;
  auto add = [&](const ChunkState& chunk, const std::string& name,
                 const std::vector<float>& values) {
    v1::CheckpointTensor* t = header.add_tensors();
    t->set_chunk(chunk.chunk);
    t->set_name(name);
    t->set_offset(static_cast<int64_t>(data.size()));
    t->set_elements(static_cast<int64_t>(values.size()));
    t->set_crc32(Crc32(values.data(), values.size() * sizeof(float)));
    t->set_chunk_version(chunk.version);
    data.append(reinterpret_cast<const char*>(values.data()),
                values.size() * sizeof(float));
  };
  for (const ChunkState& chunk : checkpoint.chunks) {
    add(chunk, "weights", chunk.weights);
    for (const auto& [name, values] : chunk.slots) add(chunk, name, values);
  }
  const std::string header_bytes = header.SerializeAsString();
  std::string out(kMagic, sizeof(kMagic));
  AppendLittleEndian<uint32_t>(kCheckpointFormatVersion, &out);
  AppendLittleEndian<uint64_t>(header_bytes.size(), &out);
  AppendLittleEndian<uint32_t>(Crc32(header_bytes.data(), header_bytes.size()),
                               &out);
  out += header_bytes;
  out += data;
  return out;
}

namespace {

// The header of a checkpoint file, its preamble and checksum checked, and
// the tensor bytes after it (a view into the file).
struct CheckpointParts {
  v1::CheckpointHeader header;
  absl::string_view data;
};

absl::StatusOr<CheckpointParts> ReadHeader(absl::string_view bytes) {
  if (bytes.size() < kPreamble) return Corrupt("shorter than its preamble");
  if (std::memcmp(bytes.data(), kMagic, sizeof(kMagic)) != 0) {
    return Corrupt("not a Lockstep checkpoint (bad magic)");
  }
  const uint32_t format = ReadLittleEndian<uint32_t>(bytes.data() + 8);
  if (format != kCheckpointFormatVersion) {
    return Corrupt(absl::StrCat("format version ", format, ", this build reads ",
                                kCheckpointFormatVersion));
  }
  const uint64_t header_size = ReadLittleEndian<uint64_t>(bytes.data() + 12);
  const uint32_t header_crc = ReadLittleEndian<uint32_t>(bytes.data() + 20);
  if (header_size > bytes.size() - kPreamble) return Corrupt("truncated header");
  if (header_size > static_cast<uint64_t>(INT_MAX)) {
    return Corrupt("header larger than 2 GiB");
  }
  const absl::string_view header_bytes = bytes.substr(kPreamble, header_size);
  if (Crc32(header_bytes.data(), header_bytes.size()) != header_crc) {
    return Corrupt("header checksum mismatch");
  }
  CheckpointParts parts;
  if (!parts.header.ParseFromArray(header_bytes.data(),
                                   static_cast<int>(header_bytes.size()))) {
    return Corrupt("unreadable header");
  }
  parts.data = bytes.substr(kPreamble + header_size);
  return parts;
}

// The header's signature, refused when its shapes' products overflow or go
// negative: every later size computation (NumParameters, ChunkPlan) would
// be undefined.
absl::StatusOr<ModelSignature> ReadSignature(
    const v1::CheckpointHeader& header) {
  absl::StatusOr<ModelSignature> signature =
      SignatureFromProto(header.signature());
  if (!signature.ok()) return Corrupt(signature.status().message());
  int64_t parameters = 0;
  for (const TensorInfo& t : signature->tensors) {
    int64_t n = 1;
    for (int64_t d : t.shape) {
      if (d < 0 || __builtin_mul_overflow(n, d, &n)) {
        return Corrupt(absl::StrCat("tensor ", t.name, " has a bad shape"));
      }
    }
    if (__builtin_add_overflow(parameters, n, &parameters) ||
        parameters > kMaxCheckpointParameters) {
      return Corrupt("the model's parameter count overflows");
    }
  }
  return signature;
}

// Adds tensor `t` (its bytes in `data`, checksum checked) to `checkpoint`:
// a chunk's weights start the chunk, its slots follow them. On `end`: the
// end of the tensor's bytes, if past it.
absl::Status ReadTensor(const v1::CheckpointTensor& t, absl::string_view data,
                        ShardCheckpoint* checkpoint, uint64_t* end) {
  // Bounded by the data before multiplying: elements * 4 must not wrap.
  if (t.offset() < 0 || t.elements() < 0 ||
      static_cast<uint64_t>(t.offset()) > data.size() ||
      static_cast<uint64_t>(t.elements()) >
          (data.size() - static_cast<uint64_t>(t.offset())) / sizeof(float)) {
    return Corrupt(absl::StrCat("tensor ", t.name(), " of chunk ", t.chunk(),
                                " lies past the end of the file (truncated)"));
  }
  const uint64_t bytes_needed =
      static_cast<uint64_t>(t.elements()) * sizeof(float);
  *end = std::max(*end, static_cast<uint64_t>(t.offset()) + bytes_needed);
  const char* p = data.data() + t.offset();
  if (Crc32(p, bytes_needed) != t.crc32()) {
    return Corrupt(absl::StrCat("checksum mismatch in tensor ", t.name(),
                                " of chunk ", t.chunk()));
  }
  std::vector<float> values(static_cast<size_t>(t.elements()));
  // memcpy from or to null is undefined even for 0 bytes.
  if (bytes_needed > 0) std::memcpy(values.data(), p, bytes_needed);
  if (t.name() == "weights") {
    ChunkState chunk;
    chunk.chunk = t.chunk();
    chunk.version = t.chunk_version();
    chunk.weights = std::move(values);
    checkpoint->chunks.push_back(std::move(chunk));
  } else if (!checkpoint->chunks.empty() &&
             checkpoint->chunks.back().chunk == t.chunk()) {
    checkpoint->chunks.back().slots.emplace_back(t.name(), std::move(values));
  } else {
    return Corrupt(absl::StrCat("slot ", t.name(), " of chunk ", t.chunk(),
                                " comes before the chunk's weights"));
  }
  return absl::OkStatus();
}

}  // namespace

absl::StatusOr<ShardCheckpoint> DecodeCheckpoint(absl::string_view bytes) {
  ASSIGN_OR_RETURN(CheckpointParts parts, ReadHeader(bytes));
  const v1::CheckpointHeader& header = parts.header;
  ShardCheckpoint checkpoint;
  ASSIGN_OR_RETURN(checkpoint.signature, ReadSignature(header));
  checkpoint.shard = header.shard();
  checkpoint.num_shards = header.num_shards();
  checkpoint.num_workers = header.num_workers();
  checkpoint.version = header.version();
  uint64_t end = 0;  // Of the last tensor's bytes.
  for (const v1::CheckpointTensor& t : header.tensors()) {
    RETURN_IF_ERROR(ReadTensor(t, parts.data, &checkpoint, &end));
  }
  // The tensors fill the file: anything after them (an appended or
  // half-overwritten tail) is damage the checksums would not see.
  if (end != parts.data.size()) {
    return Corrupt(
        absl::StrCat(parts.data.size() - end, " bytes after the last tensor"));
  }
  return checkpoint;
}

}  // namespace lockstep
