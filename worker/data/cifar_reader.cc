#include "worker/data/cifar_reader.h"

#include <sys/stat.h>

#include <cerrno>
#include <cstdint>
#include <cstdio>
#include <memory>
#include <string>
#include <vector>

#include "absl/strings/str_cat.h"
#include "absl/strings/str_format.h"
#include "common/base/status_macros.h"

namespace lockstep {
namespace {

struct FileCloser {
  void operator()(std::FILE* f) const { std::fclose(f); }
};

// As the IDX reader: a file past this (a device, a wrong path) is refused
// rather than read until memory runs out. A CIFAR-10 file holds 30 MB.
constexpr size_t kMaxFileBytes = size_t{1} << 31;

absl::StatusOr<std::vector<uint8_t>> ReadWholeFile(const std::string& path) {
  std::unique_ptr<std::FILE, FileCloser> file(std::fopen(path.c_str(), "rb"));
  if (file == nullptr) {
    return absl::ErrnoToStatus(errno, absl::StrCat("cannot open ", path));
  }
  auto too_large = [&] {
    return absl::InvalidArgumentError(
        absl::StrCat(path, ": larger than ", kMaxFileBytes,
                     " bytes; a CIFAR-10 batch file holds 10000 records of ",
                     kCifarRecordBytes));
  };
  // A regular file says its size; anything else is read up to the limit.
  struct stat st;
  if (fstat(fileno(file.get()), &st) == 0 && S_ISREG(st.st_mode) &&
      static_cast<uint64_t>(st.st_size) > kMaxFileBytes) {
    return too_large();
  }
  std::vector<uint8_t> bytes;
  uint8_t buffer[1 << 16];
  size_t got;
  while ((got = std::fread(buffer, 1, sizeof(buffer), file.get())) > 0) {
    if (bytes.size() + got > kMaxFileBytes) return too_large();
    bytes.insert(bytes.end(), buffer, buffer + got);
  }
  if (std::ferror(file.get())) {
    return absl::DataLossError(absl::StrCat(path, ": read failed"));
  }
  return bytes;
}

// Appends the records of `bytes` (already checked to be whole records) to
// `data`, normalized and in NHWC order.
absl::Status AppendRecords(const std::string& path,
                           const std::vector<uint8_t>& bytes, Dataset& data) {
  const int64_t records =
      static_cast<int64_t>(bytes.size()) / kCifarRecordBytes;
  float scale[kCifarChannels], shift[kCifarChannels];
  for (int c = 0; c < kCifarChannels; ++c) {
    scale[c] = 1.0f / (255.0f * kCifarStd[c]);
    shift[c] = -kCifarMean[c] / kCifarStd[c];
  }
  const size_t first = data.features.size();
  data.features.resize(first + records * kCifarImageBytes);
  data.labels.reserve(data.labels.size() + records);
  constexpr int kPlane = kCifarHeight * kCifarWidth;
  for (int64_t r = 0; r < records; ++r) {
    const uint8_t* record = bytes.data() + r * kCifarRecordBytes;
    if (record[0] >= kCifarClasses) {
      return absl::InvalidArgumentError(absl::StrFormat(
          "%s: record %d has label %d; CIFAR-10 labels are 0 to %d", path, r,
          record[0], kCifarClasses - 1));
    }
    data.labels.push_back(record[0]);
    const uint8_t* planes = record + 1;
    float* image = data.features.data() + first + r * kCifarImageBytes;
    for (int p = 0; p < kPlane; ++p) {
      for (int c = 0; c < kCifarChannels; ++c) {
        image[p * kCifarChannels + c] =
            planes[c * kPlane + p] * scale[c] + shift[c];
      }
    }
  }
  data.num_examples += records;
  return absl::OkStatus();
}

absl::Status ReadInto(const std::string& path, Dataset& data) {
  ASSIGN_OR_RETURN(std::vector<uint8_t> bytes, ReadWholeFile(path));
  if (bytes.empty() || bytes.size() % kCifarRecordBytes != 0) {
    return absl::InvalidArgumentError(absl::StrFormat(
        "%s: %d bytes is not a positive multiple of the %d-byte CIFAR-10 "
        "record (1 label byte + 3072 pixel bytes)",
        path, bytes.size(), kCifarRecordBytes));
  }
  return AppendRecords(path, bytes, data);
}

Dataset EmptyCifar() {
  Dataset data;
  data.feature_dim = kCifarImageBytes;
  data.num_classes = kCifarClasses;
  return data;
}

}  // namespace

absl::StatusOr<Dataset> ReadCifarFile(const std::string& path) {
  Dataset data = EmptyCifar();
  RETURN_IF_ERROR(ReadInto(path, data));
  return data;
}

absl::StatusOr<Dataset> LoadCifar10(const std::string& dir, bool train) {
  std::vector<std::string> names;
  if (train) {
    for (int i = 1; i <= 5; ++i) {
      names.push_back(absl::StrCat("data_batch_", i, ".bin"));
    }
  } else {
    names.push_back("test_batch.bin");
  }
  Dataset data = EmptyCifar();
  for (const std::string& name : names) {
    RETURN_IF_ERROR(
        ReadInto(dir.empty() ? name : absl::StrCat(dir, "/", name), data));
  }
  return data;
}

}  // namespace lockstep
