#include "server/core/checkpoint.h"

#include <dirent.h>
#include <fcntl.h>
#include <sys/stat.h>
#include <unistd.h>
#include <zlib.h>

#include <algorithm>
#include <cerrno>
#include <climits>
#include <cstring>
#include <iterator>

#include "absl/strings/match.h"
#include "absl/strings/str_cat.h"
#include "absl/strings/str_format.h"
#include "absl/time/time.h"
#include "common/signature_proto.h"
#include "common/status_macros.h"
#include "lockstep/v1/lockstep.pb.h"

namespace lockstep {
namespace {

constexpr char kMagic[8] = {'L', 'S', 'C', 'K', 'P', 'T', '\n', '\0'};
constexpr size_t kPreamble = 8 + 4 + 8 + 4;  // magic, format, length, crc.
constexpr char kSuffix[] = ".lsc";
// A temporary checkpoint file nobody has written for this long is a
// leftover of a writer that died.
constexpr absl::Duration kStaleTmpAge = absl::Minutes(10);

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

absl::Status Errno(absl::string_view what, const std::string& path) {
  return absl::UnavailableError(
      absl::StrCat(what, " ", path, ": ", std::strerror(errno)));
}

absl::Status WriteAll(int fd, absl::string_view bytes,
                      const std::string& path) {
  while (!bytes.empty()) {
    const ssize_t n = write(fd, bytes.data(), bytes.size());
    if (n < 0) {
      if (errno == EINTR) continue;
      return Errno("cannot write", path);
    }
    bytes.remove_prefix(static_cast<size_t>(n));
  }
  return absl::OkStatus();
}

absl::Status FsyncPath(const std::string& path, int flags) {
  const int fd = open(path.c_str(), flags);
  if (fd < 0) return Errno("cannot open", path);
  const int rc = fsync(fd);
  close(fd);
  return rc == 0 ? absl::OkStatus() : Errno("cannot fsync", path);
}

// The whole file, read with POSIX calls so that a failure names its errno.
absl::StatusOr<std::string> ReadAll(const std::string& path) {
  const int fd = open(path.c_str(), O_RDONLY | O_CLOEXEC);
  if (fd < 0) return Errno("cannot open", path);
  std::string bytes;
  char buf[1 << 16];
  while (true) {
    const ssize_t n = read(fd, buf, sizeof(buf));
    if (n < 0 && errno == EINTR) continue;
    if (n < 0) {
      const absl::Status error = Errno("cannot read", path);
      close(fd);
      return error;
    }
    if (n == 0) break;
    bytes.append(buf, static_cast<size_t>(n));
  }
  close(fd);
  return bytes;
}

absl::Status MakeDirs(const std::string& dir) {
  std::string path;
  for (size_t i = 0; i <= dir.size(); ++i) {
    if (i == dir.size() || dir[i] == '/') {
      path = dir.substr(0, i);
      if (!path.empty() && mkdir(path.c_str(), 0755) != 0 && errno != EEXIST) {
        return Errno("cannot create", path);
      }
    }
  }
  return absl::OkStatus();
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

absl::StatusOr<ShardCheckpoint> DecodeCheckpoint(absl::string_view bytes) {
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
  v1::CheckpointHeader header;
  if (!header.ParseFromArray(header_bytes.data(),
                             static_cast<int>(header_bytes.size()))) {
    return Corrupt("unreadable header");
  }
  const absl::string_view data = bytes.substr(kPreamble + header_size);
  ShardCheckpoint checkpoint;
  absl::StatusOr<ModelSignature> signature =
      SignatureFromProto(header.signature());
  if (!signature.ok()) return Corrupt(signature.status().message());
  checkpoint.signature = *std::move(signature);
  // Shapes whose products overflow or go negative would make every later
  // size computation (NumParameters, ChunkPlan) undefined.
  int64_t parameters = 0;
  for (const TensorInfo& t : checkpoint.signature.tensors) {
    int64_t n = 1;
    for (int64_t d : t.shape) {
      if (d < 0 || __builtin_mul_overflow(n, d, &n)) {
        return Corrupt(absl::StrCat("tensor ", t.name, " has a bad shape"));
      }
    }
    if (__builtin_add_overflow(parameters, n, &parameters) ||
        parameters > (int64_t{1} << 50)) {
      return Corrupt("the model's parameter count overflows");
    }
  }
  checkpoint.shard = header.shard();
  checkpoint.num_shards = header.num_shards();
  checkpoint.num_workers = header.num_workers();
  checkpoint.version = header.version();
  uint64_t end = 0;  // Of the last tensor's bytes.
  for (const v1::CheckpointTensor& t : header.tensors()) {
    // Bounded by the data before multiplying: elements * 4 must not wrap.
    if (t.offset() < 0 || t.elements() < 0 ||
        static_cast<uint64_t>(t.offset()) > data.size() ||
        static_cast<uint64_t>(t.elements()) >
            (data.size() - static_cast<uint64_t>(t.offset())) / 4) {
      return Corrupt(absl::StrCat("tensor ", t.name(), " of chunk ", t.chunk(),
                                  " lies past the end of the file (truncated)"));
    }
    const uint64_t bytes_needed = static_cast<uint64_t>(t.elements()) * 4;
    end = std::max(end, static_cast<uint64_t>(t.offset()) + bytes_needed);
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
      checkpoint.chunks.push_back(std::move(chunk));
    } else if (!checkpoint.chunks.empty() &&
               checkpoint.chunks.back().chunk == t.chunk()) {
      checkpoint.chunks.back().slots.emplace_back(t.name(), std::move(values));
    } else {
      return Corrupt(absl::StrCat("slot ", t.name(), " of chunk ", t.chunk(),
                                  " comes before the chunk's weights"));
    }
  }
  // The tensors fill the file: anything after them (an appended or
  // half-overwritten tail) is damage the checksums would not see.
  if (end != data.size()) {
    return Corrupt(absl::StrCat(data.size() - end,
                                " bytes after the last tensor"));
  }
  return checkpoint;
}

absl::StatusOr<std::unique_ptr<CheckpointStore>> CheckpointStore::Create(
    const std::string& dir, int shard, int num_shards, int keep, Env* env) {
  if (keep < 1) {
    return absl::InvalidArgumentError("must keep at least one checkpoint");
  }
  const std::string shard_dir =
      absl::StrCat(dir, "/shard-", shard, "-of-", num_shards);
  RETURN_IF_ERROR(MakeDirs(shard_dir));
  // Found now, not at the first save: a file in the way, or a folder this
  // user cannot write.
  struct stat st;
  if (stat(shard_dir.c_str(), &st) != 0 || !S_ISDIR(st.st_mode) ||
      access(shard_dir.c_str(), W_OK | X_OK) != 0) {
    return absl::FailedPreconditionError(absl::StrCat(
        "checkpoint folder ", shard_dir, " is not a writable directory"));
  }
  return std::unique_ptr<CheckpointStore>(
      new CheckpointStore(shard_dir, keep, env));
}

std::vector<std::string> CheckpointStore::Files(
    absl::string_view suffix) const {
  std::vector<std::string> names;
  if (DIR* d = opendir(dir_.c_str())) {
    while (dirent* e = readdir(d)) {
      const std::string name = e->d_name;
      if (absl::StartsWith(name, "ckpt-") && absl::EndsWith(name, suffix)) {
        names.push_back(name);
      }
    }
    closedir(d);
  }
  // Zero-padded versions sort by name.
  std::sort(names.begin(), names.end());
  for (std::string& name : names) name = absl::StrCat(dir_, "/", name);
  return names;
}

std::vector<std::string> CheckpointStore::List() const {
  return Files(kSuffix);
}

absl::StatusOr<std::string> CheckpointStore::Save(
    const ShardCheckpoint& checkpoint) {
  const std::string path =
      absl::StrFormat("%s/ckpt-%012d%s", dir_, checkpoint.version, kSuffix);
  const std::string tmp = path + ".tmp";
  const std::string bytes = EncodeCheckpoint(checkpoint, env_->Now());
  const int fd = open(tmp.c_str(), O_WRONLY | O_CREAT | O_TRUNC, 0644);
  if (fd < 0) return Errno("cannot create", tmp);
  absl::Status written = WriteAll(fd, bytes, tmp);
  if (written.ok() && fsync(fd) != 0) written = Errno("cannot fsync", tmp);
  close(fd);
  if (!written.ok()) {
    unlink(tmp.c_str());
    return written;
  }
  if (absl::Status renamed = env_->RenameFile(tmp, path); !renamed.ok()) {
    unlink(tmp.c_str());
    return absl::UnavailableError(renamed.message());
  }
  RETURN_IF_ERROR(FsyncPath(dir_, O_RDONLY | O_DIRECTORY));
  std::vector<std::string> all = List();
  for (size_t i = 0; i + keep_ < all.size(); ++i) {
    if (all[i] != path) unlink(all[i].c_str());
  }
  return path;
}

absl::StatusOr<std::optional<ShardCheckpoint>> CheckpointStore::LoadNewest(
    std::vector<std::string>* notes) const {
  // A write that did not finish (the server died before its rename) left its
  // temporary file: never read, and never pruned by Save, it would stay for
  // good, one model's size per crash. Only files untouched for
  // kStaleTmpAge go: a predecessor still writing its last checkpoint on a
  // shared volume (a replacement pod started early) keeps its own.
  const absl::Time now = env_->Now();
  for (const std::string& path : Files(absl::StrCat(kSuffix, ".tmp"))) {
    struct stat st;
    if (stat(path.c_str(), &st) == 0 &&
        now - absl::TimeFromTimespec(st.st_mtim) >= kStaleTmpAge &&
        unlink(path.c_str()) == 0) {
      notes->push_back(
          absl::StrCat("removed ", path,
                       ", left by a checkpoint write that did not finish"));
    }
  }
  std::vector<std::string> all = List();
  for (auto it = all.rbegin(); it != all.rend(); ++it) {
    // A file that cannot be read (permissions, an I/O error) is not known
    // to be damaged: stop rather than set it aside and roll back.
    absl::StatusOr<std::string> contents = ReadAll(*it);
    if (!contents.ok()) {
      return absl::Status(
          contents.status().code(),
          absl::StrCat(contents.status().message(),
                       " (not set aside: it may be intact; make it readable "
                       "or move it away)"));
    }
    absl::StatusOr<ShardCheckpoint> checkpoint = DecodeCheckpoint(*contents);
    if (checkpoint.ok()) return std::optional<ShardCheckpoint>(*checkpoint);
    // Set aside, out of the listing: it is kept for a look, never chosen
    // again, and never counted as one of the newest when Save prunes (which
    // could otherwise delete the good ones and keep it).
    const std::string aside = *it + ".corrupt";
    const bool moved = env_->RenameFile(*it, aside).ok();
    notes->push_back(absl::StrCat(
        *it, ": ", checkpoint.status().message(),
        moved ? absl::StrCat("; set aside as ", aside) : "",
        std::next(it) != all.rend() ? "; falling back to the previous one"
                                    : "; no earlier checkpoint is left"));
  }
  return std::optional<ShardCheckpoint>();
}

std::vector<std::string> CheckpointStore::SetAside() const {
  return Files(absl::StrCat(kSuffix, ".corrupt"));
}

}  // namespace lockstep
