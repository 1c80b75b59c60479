// Reader for the IDX format of MNIST and Fashion-MNIST, plain or gzip.
//
// IDX: magic 0x00 0x00 <type> <ndims> (big-endian), then ndims big-endian
// uint32 dimensions, then the data. Only type 0x08 (unsigned byte) is read.
#ifndef LOCKSTEP_WORKER_DATA_IDX_READER_H_
#define LOCKSTEP_WORKER_DATA_IDX_READER_H_

#include <cstdint>
#include <string>
#include <vector>

#include "absl/status/statusor.h"

namespace lockstep {

struct IdxArray {
  std::vector<int64_t> dims;
  std::vector<uint8_t> data;  // Product of dims bytes.
};

// NOT_FOUND for a missing file; INVALID_ARGUMENT naming the file and the
// problem for a wrong magic, an unsupported type, a truncated body or
// trailing bytes. Gzip is detected by content, not by name.
absl::StatusOr<IdxArray> ReadIdxFile(const std::string& path);

}  // namespace lockstep

#endif  // LOCKSTEP_WORKER_DATA_IDX_READER_H_
