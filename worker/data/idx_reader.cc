#include "worker/data/idx_reader.h"

#include <zlib.h>

#include <algorithm>
#include <cerrno>
#include <cstdint>
#include <memory>
#include <string>
#include <utility>
#include <vector>

#include "absl/status/status.h"
#include "absl/status/statusor.h"
#include "absl/strings/str_cat.h"
#include "absl/strings/str_format.h"
#include "common/base/status_macros.h"

namespace lockstep {
namespace {

// The only element type the MNIST family uses.
constexpr uint8_t kTypeUnsignedByte = 0x08;
// No data set we read has more than 3 dimensions; a larger count means a
// corrupt header, not a legitimate file.
constexpr int kMaxDims = 8;
// A corrupt header can claim petabytes; refuse before allocating. 2 GiB is
// ~40x the largest MNIST-family file.
constexpr uint64_t kMaxBytes = uint64_t{1} << 31;
// gzread takes an unsigned length and returns an int, so large bodies are
// read in pieces. Growing the buffer piece by piece also means a truncated
// file with a huge header costs only what it actually holds.
constexpr size_t kReadChunk = size_t{1} << 24;

struct GzCloser {
  void operator()(gzFile f) const { gzclose(f); }
};
using GzFilePtr = std::unique_ptr<gzFile_s, GzCloser>;

absl::Status Malformed(const std::string& path, const std::string& problem) {
  return absl::InvalidArgumentError(absl::StrCat(path, ": ", problem));
}

// Reads up to `n` bytes into `buf`, stopping early only at the end of the
// data. Decompression errors -- including a gzip stream cut short, which zlib
// reports as Z_BUF_ERROR next to a short, non-failing read -- become
// INVALID_ARGUMENT, so callers only have to compare the count.
absl::StatusOr<size_t> ReadUpTo(gzFile file, const std::string& path,
                                uint8_t* buf, size_t n) {
  size_t got = 0;
  while (got < n) {
    const unsigned want = static_cast<unsigned>(std::min(n - got, kReadChunk));
    const int r = gzread(file, buf + got, want);
    if (r < 0) {
      int errnum = Z_OK;
      const char* msg = gzerror(file, &errnum);
      if (errnum == Z_ERRNO) {
        return absl::ErrnoToStatus(errno, absl::StrCat(path, ": read failed"));
      }
      return Malformed(path, absl::StrCat("corrupt gzip data (", msg, ")"));
    }
    got += static_cast<size_t>(r);
    if (static_cast<unsigned>(r) < want) break;
  }
  int errnum = Z_OK;
  gzerror(file, &errnum);
  if (errnum == Z_BUF_ERROR) {
    return Malformed(path, "truncated gzip stream (unexpected end of file)");
  }
  return got;
}

uint32_t BigEndian32(const uint8_t* p) {
  return (uint32_t{p[0]} << 24) | (uint32_t{p[1]} << 16) |
         (uint32_t{p[2]} << 8) | uint32_t{p[3]};
}

// Opens `path`, gzip or plain: gzopen reads both (transparent mode), which
// is what lets us detect compression by content rather than by name.
absl::StatusOr<GzFilePtr> OpenIdx(const std::string& path) {
  errno = 0;
  GzFilePtr file(gzopen(path.c_str(), "rb"));
  if (file == nullptr) {
    if (errno == ENOENT) {
      return absl::NotFoundError(absl::StrCat(path, ": no such file"));
    }
    if (errno != 0) {
      return absl::ErrnoToStatus(errno, absl::StrCat(path, ": cannot open"));
    }
    return absl::ResourceExhaustedError(
        absl::StrCat(path, ": cannot allocate a gzip reader"));
  }
  // The default 8 KiB buffer makes reading a 47 MB file needlessly slow.
  gzbuffer(file.get(), 1 << 17);
  return file;
}

// Reads the magic and returns the number of dimensions it announces.
absl::StatusOr<int> ReadMagic(gzFile file, const std::string& path) {
  uint8_t magic[4];
  ASSIGN_OR_RETURN(size_t got, ReadUpTo(file, path, magic, 4));
  if (got < 4) {
    return Malformed(
        path, absl::StrFormat("truncated header: %d of 4 magic bytes", got));
  }
  if (magic[0] != 0 || magic[1] != 0) {
    return Malformed(path,
                     absl::StrFormat("wrong magic 0x%02x%02x%02x%02x, not an "
                                     "IDX file (expected 0x0000....)",
                                     magic[0], magic[1], magic[2], magic[3]));
  }
  if (magic[2] != kTypeUnsignedByte) {
    return Malformed(path,
                     absl::StrFormat("unsupported IDX element type 0x%02x "
                                     "(only 0x08, unsigned byte, is read)",
                                     magic[2]));
  }
  const int ndims = magic[3];
  if (ndims == 0 || ndims > kMaxDims) {
    return Malformed(path, absl::StrFormat("%d dimensions (expected 1 to %d)",
                                           ndims, kMaxDims));
  }
  return ndims;
}

// Reads `ndims` dimensions into array->dims; returns the data's bytes.
absl::StatusOr<uint64_t> ReadDims(gzFile file, const std::string& path,
                                  int ndims, IdxArray* array) {
  uint8_t dim_bytes[4 * kMaxDims];
  const size_t dim_len = 4 * static_cast<size_t>(ndims);
  ASSIGN_OR_RETURN(size_t got, ReadUpTo(file, path, dim_bytes, dim_len));
  if (got < dim_len) {
    return Malformed(path,
                     absl::StrFormat("truncated header: %d of %d dimension "
                                     "bytes",
                                     got, dim_len));
  }
  array->dims.reserve(ndims);
  // Every partial product stays <= kMaxBytes (2^31) and each dimension is
  // < 2^32, so the next multiplication cannot overflow 64 bits.
  uint64_t total = 1;
  for (int i = 0; i < ndims; ++i) {
    const uint32_t dim = BigEndian32(dim_bytes + 4 * i);
    array->dims.push_back(dim);
    total *= dim;
    if (total > kMaxBytes) {
      return Malformed(
          path, absl::StrFormat("dimensions claim more than %d bytes of data",
                                kMaxBytes));
    }
  }
  return total;
}

// Reads the `total` data bytes into array->data, and checks that nothing
// follows them.
absl::Status ReadBody(gzFile file, const std::string& path, uint64_t total,
                      IdxArray* array) {
  while (array->data.size() < total) {
    const size_t start = array->data.size();
    const size_t want = std::min<size_t>(total - start, kReadChunk);
    array->data.resize(start + want);
    ASSIGN_OR_RETURN(const size_t got,
                     ReadUpTo(file, path, array->data.data() + start, want));
    if (got < want) {
      return Malformed(path,
                       absl::StrFormat("truncated body: %d of %d data bytes",
                                       start + got, total));
    }
  }
  // Data after the body means the header does not describe the file; using
  // it anyway would silently read the wrong shape.
  uint8_t extra;
  ASSIGN_OR_RETURN(const size_t got, ReadUpTo(file, path, &extra, 1));
  if (got != 0) {
    return Malformed(path, absl::StrFormat("trailing bytes after the %d data "
                                           "bytes the header describes",
                                           total));
  }
  return absl::OkStatus();
}

}  // namespace

absl::StatusOr<IdxArray> ReadIdxFile(const std::string& path) {
  ASSIGN_OR_RETURN(GzFilePtr file, OpenIdx(path));
  ASSIGN_OR_RETURN(const int ndims, ReadMagic(file.get(), path));
  IdxArray array;
  ASSIGN_OR_RETURN(const uint64_t total,
                   ReadDims(file.get(), path, ndims, &array));
  RETURN_IF_ERROR(ReadBody(file.get(), path, total, &array));
  return array;
}

}  // namespace lockstep
