// libFuzzer target: worker/data/idx_reader.h on arbitrary files (plain or
// gzip).
#include <sys/mman.h>
#include <unistd.h>

#include <cstddef>
#include <cstdint>
#include <string>

#include "worker/data/idx_reader.h"

extern "C" int LLVMFuzzerTestOneInput(const uint8_t* data, size_t size) {
  // ReadIdxFile takes a path: hand it an in-memory file.
  const int fd = memfd_create("idx", 0);
  if (fd < 0) return 0;
  size_t written = 0;
  while (written < size) {
    const ssize_t n = write(fd, data + written, size - written);
    if (n <= 0) break;
    written += static_cast<size_t>(n);
  }
  absl::StatusOr<lockstep::IdxArray> array =
      lockstep::ReadIdxFile("/proc/self/fd/" + std::to_string(fd));
  close(fd);
  if (array.ok()) {
    // A successful read is exactly what its header says.
    uint64_t total = 1;
    for (int64_t d : array->dims) total *= static_cast<uint64_t>(d);
    if (total != array->data.size()) __builtin_trap();
  }
  return 0;
}
